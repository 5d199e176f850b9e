"""Loaders for the RFC 9421 / RFC 9530 vectors in tests/data/rfc9421 (see its README.md).

The directory can be overridden with UCPGW_RFC9421_VECTORS. Sources: RFC 9421 App. B, §2.4, §2.5,
§4.3 (draft -19 text = RFC), RFC 9530 App. D; see the README there for provenance and the B.2
Content-Digest erratum (we use ``test-response.corrected.http``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from ucp_gateway.httpsig.debug import parse_http_message

DATA = Path(os.environ.get("UCPGW_RFC9421_VECTORS", Path(__file__).resolve().parents[1] / "data" / "rfc9421"))

MESSAGES = {
    "B.2.1": ("test-request.http", None),
    "B.2.2": ("test-request.http", None),
    "B.2.3": ("test-request.http", None),
    "B.2.4": ("test-response.corrected.http", "test-request.http"),
    "B.2.5": ("test-request.http", None),
    "B.2.6": ("test-request.http", None),
    "S2.5-sig1": ("test-request.http", None),
    "S2.4-reqres-1": ("s2.4-response-503-unsigned.http", "test-request.http"),
    "S2.4-reqres-2": ("s2.4-response-503-unsigned.http", "s2.4-request-signed-sig1.http"),
    "S2.4-request-sig1": ("s2.4-request-signed-sig1.http", None),
    "S4.3-sig1": ("s4.3-client-request.http", None),
    "S4.3-proxy_sig": ("s4.3-proxied-request-two-signatures.http", None),
    "B.3-ttrp": ("b3-proxied-request-unsigned.http", None),
    "B.4-transform": ("b4-transform-original.http", None),
}


def cases() -> list[dict]:
    return json.loads((DATA / "vectors.json").read_text())["cases"]


def keys() -> dict:
    return json.loads((DATA / "keys" / "keys.json").read_text())


def read_message(name: str, request=None):
    raw = (DATA / "messages" / name).read_bytes().replace(b"\n\n\n", b"\n\n")  # one file has a stray LF
    return parse_http_message(raw, request=request)


def message_for(case_id: str):
    main, req = MESSAGES[case_id]
    return read_message(main, request=read_message(req) if req else None)


def ecc_private_key():
    return serialization.load_pem_private_key(keys()["test-key-ecc-p256"]["private_pem"].encode(), None)


def ecc_public_jwk() -> dict:
    return json.loads((DATA / "keys" / "test-key-ecc-p256.public.jwk.json").read_text())

"""Test-side RFC 9421 signing/verification with the RFC's published P-256 test key (B.1.3).

Stands in for the company key until the signatures package signs webhooks; uses the same library.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from http_message_signatures import (
    HTTPMessageSigner,
    HTTPMessageVerifier,
    HTTPSignatureKeyResolver,
    algorithms,
)
from multidict import CIMultiDict as CaseInsensitiveDict

KEYS = Path("/work/shared/data/rfc9421/keys")
KID = "test-key-ecc-p256"
_PRIV = serialization.load_pem_private_key((KEYS / "test-key-ecc-p256.priv.pkcs8.pem").read_bytes(), None)
_PUB = _PRIV.public_key()
COMPONENTS = (
    "@method",
    "@authority",
    "@path",
    "content-digest",
    "content-type",
    "ucp-agent",
    "webhook-id",
    "webhook-timestamp",
)


class _Keys(HTTPSignatureKeyResolver):
    def resolve_private_key(self, key_id):
        return _PRIV

    def resolve_public_key(self, key_id):
        return _PUB


class Msg:
    def __init__(self, method, url, headers, body=b""):
        self.method, self.url, self.headers, self.body = method, url, CaseInsensitiveDict(headers), body


def digest(body: bytes) -> str:
    return "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"


async def sign_webhook(pool, company_id, *, url, body, ucp_agent, webhook_id, webhook_timestamp, now):
    m = Msg(
        "POST",
        url,
        {
            "Content-Type": "application/json",
            "Content-Digest": digest(body),
            "UCP-Agent": ucp_agent,
            "Webhook-Id": webhook_id,
            "Webhook-Timestamp": webhook_timestamp,
        },
        body,
    )
    HTTPMessageSigner(signature_algorithm=algorithms.ECDSA_P256_SHA256, key_resolver=_Keys()).sign(
        m,
        key_id=KID,
        label="sig1",
        include_alg=False,
        covered_component_ids=COMPONENTS,
        body=body,
        use_existing_digest=True,
    )
    return dict(m.headers)


def verify(method: str, url: str, headers, body: bytes) -> None:
    """Raise unless the message carries a valid sig1 over COMPONENTS and a matching Content-Digest."""
    assert headers["Content-Digest"] == digest(body)
    HTTPMessageVerifier(signature_algorithm=algorithms.ECDSA_P256_SHA256, key_resolver=_Keys()).verify(
        Msg(method, url, dict(headers), body), require_components=COMPONENTS, max_age=None, body=body
    )

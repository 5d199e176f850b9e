"""Response-signing micro-benchmark: what one signed response costs the gateway.

Prints, in one run (embedded PostgreSQL in a temporary directory, a real company key):
  raw      cryptography ECDSA P-256 signatures/s of the response's signature base (the floor);
  view     sign_response_view() calls/s with the key already in hand (digest, base, sign, headers);
  key      active_signing_key() calls/s (DB lookup of the active key + private key object);
  full     sign_response() calls/s: key lookup + view signing + header copy, as the middleware does.
For each: CPU microseconds of the event-loop thread per call (time.thread_time, so load from other
processes does not inflate it) and, for the DB-bound ones, wall-clock calls/s (sequential awaits).
The three kinds run in alternating batches so that they all see the same machine load.
The response is a complete_checkout-like 200 JSON with the default UCP component set
(``@status content-digest content-type "@method";req "@authority";req "@path";req
"content-digest";req``). Usage: python bench/sign.py [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import hashlib
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from http_message_signatures import HTTPMessageSigner, algorithms
from multidict import CIMultiDict, CIMultiDictProxy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ucp_gateway.appkeys import REQ_RAW_BODY
from ucp_gateway.config import Settings
from ucp_gateway.db.database import open_database
from ucp_gateway.httpsig.messages import sign_response
from ucp_gateway.httpsig.rfc9421 import RequestView, ResponseView
from ucp_gateway.httpsig.signing import response_components, sign_response_view
from ucp_gateway.keys import KekRing, Vault, active_signing_key, attach_vault, ensure_active_key
from ucp_gateway.logs import configure_logging
from ucp_gateway.tenancy import create_company

PATH = "/checkout-sessions/chk_7f3a9c2e/complete"
REQ_BODY = b'{"payment":{"instruments":[{"handler_id":"demo","credential":{"token":"tok_ok"}}]}}'
RESP_BODY = b'{"id":"chk_7f3a9c2e","status":"completed","currency":"USD","order":{"id":"ord_1"}}'


def _digest(body: bytes) -> str:
    return "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"


def _request_headers() -> CIMultiDict[str]:
    return CIMultiDict(
        [
            ("Host", "shop.example"),
            ("Content-Type", "application/json"),
            ("Content-Digest", _digest(REQ_BODY)),
            ("UCP-Agent", 'profile="https://platform.example/profile.json"'),
            ("Signature-Input", 'sig1=("@method" "@authority" "@path");created=1;keyid="k"'),
            ("Signature", "sig1=:AAAA:"),
        ]
    )


def _request() -> web.Request:
    req = make_mocked_request("POST", PATH, headers=CIMultiDictProxy(_request_headers()))
    req[REQ_RAW_BODY] = REQ_BODY
    return req


_REQ_HEADERS = _request_headers()


def _response_view() -> ResponseView:
    req = RequestView("POST", f"https://shop.example{PATH}", _REQ_HEADERS, REQ_BODY, PATH)
    headers = CIMultiDict([("Content-Type", "application/json; charset=utf-8")])
    return ResponseView(200, headers, req, RESP_BODY)


async def main(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ring = KekRing.new_entry("bench")
        settings = Settings(
            data_dir=Path(tmp), environment="development", log_level="error", kek_ring=ring, keys_dir=Path(tmp) / "k"
        )
        configure_logging(settings)
        async with open_database(settings) as db:
            pool = db.pool
            attach_vault(pool, Vault(KekRing.parse(ring)))
            company = await create_company(pool, slug="shop", display_name="Shop", hostnames=["shop.example"])
            now = dt.datetime.now(dt.UTC)
            await ensure_active_key(pool, company.id, now=now)
            key = await active_signing_key(pool, company.id, now=now)

            # the base the library builds for this response: what a raw ECDSA signer would sign
            view = _response_view()
            view.headers["Content-Digest"] = _digest(RESP_BODY)
            signer = HTTPMessageSigner(signature_algorithm=algorithms.ECDSA_P256_SHA256)
            base = signer.prepare(
                view,
                key_id=key.kid,
                created=now,
                include_alg=False,
                label="sig1",
                covered_component_ids=response_components(True, view.request),
                use_existing_digest=True,
            ).signature_base
            priv = key.private_key
            request = _request()

            async def full() -> None:
                resp = web.Response(body=RESP_BODY, content_type="application/json")
                await sign_response(request, resp, pool=pool, company_id=company.id, now=now, scheme="https")
                assert "Signature" in resp.headers

            cpu = {"raw": 0.0, "view": 0.0, "key": 0.0, "full": 0.0}
            wall = {"key": 0.0, "full": 0.0}
            n = {k: 0 for k in cpu}
            batch = 50
            for _ in range(batch):  # warm-up (first statement preparation, caches)
                await full()
            stop = time.perf_counter() + 4 * seconds
            while time.perf_counter() < stop:
                c0 = time.thread_time()
                for _ in range(batch):
                    priv.sign(base, ec.ECDSA(hashes.SHA256()))
                c1 = time.thread_time()
                for _ in range(batch):
                    sign_response_view(_response_view(), key, now=now)
                c2 = time.thread_time()
                w0 = time.perf_counter()
                for _ in range(batch):
                    await active_signing_key(pool, company.id, now=now)
                c3, w1 = time.thread_time(), time.perf_counter()
                for _ in range(batch):
                    await full()
                c4, w2 = time.thread_time(), time.perf_counter()
                for k, d in (("raw", c1 - c0), ("view", c2 - c1), ("key", c3 - c2), ("full", c4 - c3)):
                    cpu[k] += d
                    n[k] += batch
                wall["key"] += w1 - w0
                wall["full"] += w2 - w1

    print(f"response signing, {n['full']} calls each, CPU time of the event-loop thread")
    labels = {
        "raw": "raw ECDSA P-256 sign of the base",
        "view": "sign_response_view (key in hand)",
        "key": "active_signing_key (DB + key)",
        "full": "sign_response (all of it)",
    }
    for k, label in labels.items():
        us = 1e6 * cpu[k] / n[k]
        line = f"  {label:36s} {1e6 / us:8.0f} /s CPU   {us:7.1f} us CPU per call"
        if k in wall:
            line += f"   {n[k] / wall[k]:7.0f} /s wall (sequential)"
        print(line)
    print(f"  sign_response / raw sign: {cpu['full'] / n['full'] / (cpu['raw'] / n['raw']):.1f}x CPU")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="about a quarter of the run time")
    asyncio.run(main(ap.parse_args().seconds))

"""Signature verification benchmark (issue 3): cost of the RFC 9421 middleware vs a raw verify.

Prints, in one run:
  raw      cryptography ECDSA P-256 verifications/s of the signature base of the signed POST;
  core     verify_request() calls/s on the same message (parse, coverage, digest, library verify);
  http     signed POSTs/s through the full app (create_app: request id, errors, tenancy, signature
           middleware) over a real socket, and the same POST unsigned on an exempt route;
  cost     middleware cost per request = 1/http_signed - 1/http_unsigned, and its ratio to the raw
           verify time (target: <= 2x).
Uses an embedded PostgreSQL in a temporary directory. Usage: python bench/verify.py [--seconds S]
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

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from multidict import CIMultiDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ucp_gateway.app import create_app
from ucp_gateway.clock import SystemClock
from ucp_gateway.config import Settings
from ucp_gateway.db.database import open_database
from ucp_gateway.httpsig import KEY_RESOLVER, RequestView, SignaturePolicy, StaticKeyResolver
from ucp_gateway.httpsig.verify import verify_request
from ucp_gateway.keys import KekRing
from ucp_gateway.tenancy import create_company

PROFILE = "https://platform.example/profile.json"
BODY = b'{"line_items":[{"item":{"id":"rose-bouquet"},"quantity":2}],"currency":"USD","buyer":{"email":"a@b.c"}}'


def b64u(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()


def signed_post(priv, created: int) -> tuple[list[tuple[str, str]], bytes]:
    digest = "sha-256=:" + base64.b64encode(hashlib.sha256(BODY).digest()).decode() + ":"
    hdrs = [
        ("Host", "shop.example"),
        ("UCP-Agent", f'profile="{PROFILE}"'),
        ("Idempotency-Key", "idem-1"),
        ("Content-Type", "application/json"),
        ("Content-Digest", digest),
    ]
    comps = ["@method", "@authority", "@path", "ucp-agent", "idempotency-key", "content-digest", "content-type"]
    vals = {"@method": "POST", "@authority": "shop.example", "@path": "/checkout-sessions"} | {
        n.lower(): v for n, v in hdrs
    }
    params = "(" + " ".join(f'"{c}"' for c in comps) + f');created={created};keyid="bench"'
    base = ("".join(f'"{c}": {vals[c]}\n' for c in comps) + f'"@signature-params": {params}').encode()
    r, s = decode_dss_signature(priv.sign(base, ec.ECDSA(hashes.SHA256())))
    sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    hdrs += [("Signature-Input", f"sig1={params}"), ("Signature", f"sig1=:{base64.b64encode(sig).decode()}:")]
    return hdrs, base


def rate(fn, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while (el := time.perf_counter() - t0) < seconds:
        for _ in range(50):
            fn()
        n += 50
    return n / el


async def arate(fn, seconds: float, concurrency: int = 8) -> float:
    count, stop = 0, time.perf_counter() + seconds

    async def worker():
        nonlocal count
        while time.perf_counter() < stop:
            await fn()
            count += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.perf_counter() - t0)


async def main(seconds: float) -> None:
    priv = ec.generate_private_key(ec.SECP256R1())
    nums = priv.public_key().public_numbers()
    jwk = {"kty": "EC", "crv": "P-256", "x": b64u(nums.x), "y": b64u(nums.y), "kid": "bench"}
    resolver = StaticKeyResolver({PROFILE: [jwk]})
    now = SystemClock().now()
    hdrs, base = signed_post(priv, int(now.timestamp()))
    sig = base64.b64decode(hdrs[-1][1].split(":")[1])
    der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
    pub = priv.public_key()

    raw = rate(lambda: pub.verify(der, base, ec.ECDSA(hashes.SHA256())), seconds)
    view = RequestView("POST", "https://shop.example/checkout-sessions", CIMultiDict(hdrs), BODY, "/checkout-sessions")
    policy = SignaturePolicy()
    loop_now = dt.datetime.now(dt.UTC)

    async def core_once():
        await verify_request(view, resolver, policy, loop_now, None)

    core = await arate(core_once, seconds, concurrency=1)

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            environment="development",
            log_level="error",
            kek_ring=KekRing.new_entry("bench"),
            keys_dir=Path(tmp) / "keys",
        )
        async with open_database(settings) as db:
            await create_company(db.pool, slug="shop", display_name="Shop", hostnames=["shop.example"])

            async def handler(request: web.Request) -> web.Response:
                return web.json_response({"ok": True})

            app = create_app(settings, database=db)
            app[KEY_RESOLVER] = resolver
            app.router.add_post("/checkout-sessions", handler)
            app.router.add_post("/healthz-bench", handler)  # unsigned baseline (exempt below)
            settings.httpsig_exempt_prefixes = (*settings.httpsig_exempt_prefixes, "/healthz-bench")
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            signed_h = CIMultiDict(hdrs)
            plain_h = CIMultiDict([("Host", "shop.example"), ("Content-Type", "application/json")])
            async with aiohttp.ClientSession() as s:

                async def post(path, h):
                    async with s.post(f"http://127.0.0.1:{port}{path}", data=BODY, headers=h) as r:
                        assert r.status == 200, (r.status, await r.text())
                        await r.read()

                await post("/checkout-sessions", signed_h)
                await post("/healthz-bench", plain_h)
                unsigned = await arate(lambda: post("/healthz-bench", plain_h), seconds)
                signed = await arate(lambda: post("/checkout-sessions", signed_h), seconds)
            await runner.cleanup()

    raw_us, core_us = 1e6 / raw, 1e6 / core
    cost_us = 1e6 / signed - 1e6 / unsigned
    print(f"raw cryptography ES256 verify      : {raw:9.0f} /s  ({raw_us:6.1f} us each)")
    print(f"verify_request (core, no HTTP)     : {core:9.0f} /s  ({core_us:6.1f} us each, {core_us / raw_us:.2f}x raw)")
    print(f"HTTP POST unsigned (exempt route)  : {unsigned:9.0f} /s")
    print(f"HTTP POST signed, full middleware  : {signed:9.0f} /s")
    print(f"middleware cost per request        : {cost_us:9.1f} us  ({cost_us / raw_us:.2f}x raw verify; target <= 2x)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    asyncio.run(main(ap.parse_args().seconds))

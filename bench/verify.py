"""Signature verification benchmark: cost of the RFC 9421 middleware vs a raw verify.

Prints, in one run:
  raw      cryptography ECDSA P-256 verifications/s of the signature base of the signed POST;
  core     verify_request() calls/s on the same message (parse, coverage, digest, base, ECDSA verify),
           run in alternating batches with raw so that both see the same machine load;
  http     signed POSTs/s through the full app (create_app: request id, errors, tenancy, signature
           middleware) over a real socket, and the same POST unsigned on an exempt route;
  mw       server-side time inside the signature middleware per real request over the socket
           (signed POST, handler excluded) minus the same for an unsigned POST on an exempt
           route = middleware cost per request, and its ratio to the raw verify (target: <= 2x).
           Signed and unsigned requests alternate in one phase, each followed by one raw verify
           timed in the same loop, so all three see the same machine load;
  client in another process: the same, with the load client in a separate process (the server
           thread does only server work; the server times a raw verify after each request);
  cost     the same difference measured over HTTP (1/http_signed - 1/http_unsigned; includes
           client work in the same process, so noisier);
  proofs   per call of the API key and OAuth bearer proofs (access/proofs.py: one tenant-transaction
           lookup on the real database each), wall and event-loop CPU, each next to its own floor:
           a dict lookup of the key's SHA-256 (API key); an HMAC-SHA256 and a JWT verify (what a
           self-contained token costs at least; ours are opaque, looked up); and the private_key_jwt
           client assertion's verify at the token endpoint against a raw ES256 verify. The RFC 9421
           figure is the middleware cost above, against one ES256 verify;
  wba/mtls per call of Web Bot Auth (verification alone, and the whole proof) against a raw Ed25519
           verify, and of the forwarded-certificate mTLS proof against its parse + fingerprint
           (bench/verify_wba.py).
Per-call costs are CPU time of the event-loop thread (time.thread_time), so time other processes
run is not counted (their cache pressure still slows every line alike); requests/s are wall-clock.
Like real traffic, requests are not one repeated message: every phase cycles through POOL signed
POSTs with distinct signatures and ``created`` values (so a cache keyed by an exact Signature or
Signature-Input value cannot help), and every raw verify cycles through the same (signature, base) pairs.
Uses an embedded PostgreSQL in a temporary directory. Usage: python bench/verify.py [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import hashlib
import itertools
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

from verify_wba import wba_costs  # bench/ (the script's own directory) is first on sys.path

from ucp_gateway.app import create_app
from ucp_gateway.clock import SystemClock
from ucp_gateway.config import Settings
from ucp_gateway.db.database import open_database
from ucp_gateway.httpsig import KEY_RESOLVER, RequestView, SignaturePolicy, StaticKeyResolver
from ucp_gateway.httpsig.verify import verify_request
from ucp_gateway.httpsig.web import signature_middleware
from ucp_gateway.keys import KekRing
from ucp_gateway.logs import configure_logging
from ucp_gateway.tenancy import create_company

PROFILE = "https://platform.example/profile.json"
POOL = 64  # distinct signed requests (16 distinct ``created`` seconds, every signature different)
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


def _load(port: int, targets: list[tuple[str, list]], seconds: float, concurrency: int) -> int:
    """Load generator run in a separate process, so the server's thread does only server work.
    Each worker cycles through ``targets`` (path, header lines) in order."""

    async def go() -> int:
        count, stop = 0, time.perf_counter() + seconds
        async with aiohttp.ClientSession() as s:

            async def worker():
                nonlocal count
                i = 0
                while time.perf_counter() < stop:
                    path, headers = targets[i % len(targets)]
                    i += 1
                    async with s.post(f"http://127.0.0.1:{port}{path}", data=BODY, headers=CIMultiDict(headers)) as r:
                        assert r.status == 200, r.status
                        await r.read()
                    count += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count

    return asyncio.run(go())


async def external_load(port: int, targets: list[tuple[str, list]], seconds: float, concurrency: int) -> float:
    """Requests/s from a client in another process cycling through ``targets`` (path, header lines)."""
    import concurrent.futures
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        n = await asyncio.get_running_loop().run_in_executor(pool, _load, port, targets, seconds, concurrency)
    return n / seconds


class MiddlewareTimer:
    """Server-side time spent in the signature middleware per real request and per path, handler
    excluded: a timing middleware wraps it from outside and the handler times itself.

    With ``raw_verify`` set, the server also times one raw verify after each request, outside the
    measured span: the reference for the same process state (caches, load) as the requests,
    whoever sends them (the in-process phase times its raw verify in the client loop instead)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.n: dict[str, int] = {}
        self.inner: dict[str, float] = {}
        self.raw_verify = None
        self.raw_total = 0.0
        self.raw_n = 0

    @web.middleware
    async def outer(self, request, handler):
        t0 = time.thread_time()
        resp = await handler(request)
        t = time.thread_time() - t0
        path = request.path
        self.total[path] = self.total.get(path, 0.0) + t
        self.n[path] = self.n.get(path, 0) + 1
        if self.raw_verify is not None:
            t1 = time.thread_time()
            self.raw_verify()
            self.raw_total += time.thread_time() - t1
            self.raw_n += 1
        return resp

    def add_inner(self, path: str, seconds: float) -> None:
        self.inner[path] = self.inner.get(path, 0.0) + seconds

    def reset(self) -> None:
        self.total, self.n, self.inner, self.raw_total, self.raw_n = {}, {}, {}, 0.0, 0

    def per_request_us(self, path: str) -> float:
        return (self.total.get(path, 0.0) - self.inner.get(path, 0.0)) / max(self.n.get(path, 0), 1) * 1e6

    def raw_us(self) -> float:
        return self.raw_total / max(self.raw_n, 1) * 1e6


async def main(seconds: float) -> None:
    priv = ec.generate_private_key(ec.SECP256R1())
    nums = priv.public_key().public_numbers()
    jwk = {"kty": "EC", "crv": "P-256", "x": b64u(nums.x), "y": b64u(nums.y), "kid": "bench"}
    resolver = StaticKeyResolver({PROFILE: [jwk]})
    now = int(SystemClock().now().timestamp())
    signed = [signed_post(priv, now - i % 16) for i in range(POOL)]
    raws = []  # (DER signature, signature base) of each pooled request, for the raw verifies
    for hdrs, base in signed:
        sig = base64.b64decode(hdrs[-1][1].split(":")[1])
        raws.append((encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")), base))
    pub = priv.public_key()
    raw_i = 0

    def raw_verify() -> None:
        nonlocal raw_i
        der, base = raws[raw_i % POOL]
        raw_i += 1
        pub.verify(der, base, ec.ECDSA(hashes.SHA256()))

    url = "https://shop.example/checkout-sessions"
    views = [RequestView("POST", url, CIMultiDict(h), BODY, "/checkout-sessions") for h, _ in signed]
    policy = SignaturePolicy()
    loop_now = dt.datetime.now(dt.UTC)
    # raw and core alternate in batches of 50 so that both see the same machine load
    raw_t = core_t = 0.0
    raw_n = core_n = 0
    stop = time.perf_counter() + 2 * seconds
    while time.perf_counter() < stop:
        c0 = time.thread_time()
        for _ in range(50):
            raw_verify()
        c1 = time.thread_time()
        for i in range(50):
            await verify_request(views[(core_n + i) % POOL], resolver, policy, loop_now, None)
        c2 = time.thread_time()
        raw_t, core_t, raw_n, core_n = raw_t + c1 - c0, core_t + c2 - c1, raw_n + 50, core_n + 50
    raw, core = raw_n / raw_t, core_n / core_t

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            environment="development",
            log_level="error",
            kek_ring=KekRing.new_entry("bench"),
            keys_dir=Path(tmp) / "keys",
        )
        configure_logging(settings)
        async with open_database(settings) as db:
            company = await create_company(db.pool, slug="shop", display_name="Shop", hostnames=["shop.example"])

            timer = MiddlewareTimer()

            async def handler(request: web.Request) -> web.Response:
                t0 = time.thread_time()
                resp = web.json_response({"ok": True})
                timer.add_inner(request.path, time.thread_time() - t0)
                return resp

            app = create_app(settings, database=db)
            idx = next(i for i, m in enumerate(app.middlewares) if m is signature_middleware)
            app.middlewares.insert(idx, timer.outer)
            app[KEY_RESOLVER] = resolver
            app.router.add_post("/checkout-sessions", handler)
            app.router.add_post("/healthz-bench", handler)  # unsigned baseline (exempt below)
            settings.httpsig_exempt_prefixes = (*settings.httpsig_exempt_prefixes, "/healthz-bench")
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            signed_hs = [CIMultiDict(h) for h, _ in signed]
            next_signed = itertools.cycle(signed_hs).__next__  # the pool, in turn
            plain_h = CIMultiDict([("Host", "shop.example"), ("Content-Type", "application/json")])
            async with aiohttp.ClientSession() as s:

                async def post(path, h):
                    async with s.post(f"http://127.0.0.1:{port}{path}", data=BODY, headers=h) as r:
                        assert r.status == 200, (r.status, await r.text())
                        await r.read()

                for h in signed_hs:
                    await post("/checkout-sessions", h)
                await post("/healthz-bench", plain_h)
                unsigned = await arate(lambda: post("/healthz-bench", plain_h), seconds)
                signed_rate = await arate(lambda: post("/checkout-sessions", next_signed()), seconds)
                # one request at a time, so no other request runs while the timed one awaits
                # raw verifies are timed in the same loop, so machine load affects both alike
                raw_t = [0.0, 0]

                async def with_raw(path, h):
                    await post(path, h)
                    t0 = time.thread_time()
                    raw_verify()
                    raw_t[0] += time.thread_time() - t0
                    raw_t[1] += 1

                async def both() -> None:  # unsigned and signed alternate: same load for both
                    await with_raw("/healthz-bench", plain_h)
                    await with_raw("/checkout-sessions", next_signed())

                timer.reset()
                await arate(both, 2 * seconds, concurrency=1)
                mw_unsigned_us = timer.per_request_us("/healthz-bench")
                mw_signed_us = timer.per_request_us("/checkout-sessions")
                raw_same_phase_us = raw_t[0] / raw_t[1] * 1e6
                # the same with the client in another process: server CPU time only; the server
                # times a raw verify after each request as the same-phase reference
                plain_l = list(plain_h.items())
                signed_t = [("/checkout-sessions", h) for h, _ in signed]
                targets = [t for s_t in signed_t for t in (("/healthz-bench", plain_l), s_t)]
                ext_unsigned = await external_load(port, [("/healthz-bench", plain_l)], seconds, 4)
                ext_signed = await external_load(port, signed_t, seconds, 4)
                timer.raw_verify = raw_verify
                timer.reset()
                await external_load(port, targets, 2 * seconds, 4)
                ext_mw_unsigned_us = timer.per_request_us("/healthz-bench")
                ext_mw_signed_us = timer.per_request_us("/checkout-sessions")
                ext_raw_us = timer.raw_us()
            await runner.cleanup()
            proofs = await proof_costs(db, company, seconds)
            wba = await wba_costs(db, company, settings, PROFILE, seconds)

    raw_us, core_us = 1e6 / raw, 1e6 / core
    cost_us = 1e6 / signed_rate - 1e6 / unsigned
    mw_us = mw_signed_us - mw_unsigned_us
    print(f"raw cryptography ES256 verify      : {raw:9.0f} /s  ({raw_us:6.1f} us each)")
    print(f"verify_request (core, no HTTP)     : {core:9.0f} /s  ({core_us:6.1f} us each, {core_us / raw_us:.2f}x raw)")
    print(f"HTTP POST unsigned (exempt route)  : {unsigned:9.0f} /s")
    print(f"HTTP POST signed, full middleware  : {signed_rate:9.0f} /s")
    print(
        f"in middleware, signed POST          : {mw_signed_us:9.1f} us  (unsigned exempt: {mw_unsigned_us:.1f} us; "
        f"signed = {mw_signed_us / raw_same_phase_us:.2f}x raw verify of the same phase)"
    )
    print(f"middleware verifications/s (1 core) : {1e6 / mw_signed_us:9.0f} /s")
    print(f"raw verify timed in the same phase  : {raw_same_phase_us:9.1f} us")
    ratio = mw_us / raw_same_phase_us
    print(f"middleware cost per signed request : {mw_us:9.1f} us  ({ratio:.2f}x raw verify; target <= 2x)")
    ext_cost = ext_mw_signed_us - ext_mw_unsigned_us
    print(
        f"client in another process: unsigned {ext_unsigned:.0f} /s, signed {ext_signed:.0f} /s; in middleware "
        f"{ext_mw_signed_us:.1f} us vs {ext_mw_unsigned_us:.1f} us -> cost {ext_cost:.1f} us "
        f"({ext_cost / ext_raw_us:.2f}x the raw verify timed in the server, {ext_raw_us:.1f} us; "
        f"{ext_cost / raw_us:.2f}x the hot-loop raw)"
    )
    print(f"same over HTTP (incl. client, noisy): {cost_us:9.1f} us  ({cost_us / raw_us:.2f}x raw verify)")
    print(f"RFC 9421 signed request, per request : {mw_us:9.1f} us in the middleware (floor: one ES256 verify, "
          f"{raw_same_phase_us:.1f} us)")  # fmt: skip
    for name, (wall_us, cpu_us, floor_name, floor_us) in proofs.items():
        print(f"{name:<37}: {wall_us:9.1f} us wall, {cpu_us:6.1f} us event-loop CPU per call "
              f"(floor, {floor_name}: {floor_us:.2f} us; CPU {cpu_us / floor_us:.0f}x)")  # fmt: skip
    for name, (wall_us, cpu_us, floor_name, floor_us) in wba.items():
        print(f"{name:<35}: {wall_us:9.1f} us wall, {cpu_us:6.1f} us event-loop CPU per call "
              f"(floor, {floor_name}: {floor_us:.1f} us; {cpu_us / floor_us:.2f}x)")  # fmt: skip


def _per_call(fn, n: int = 20_000) -> float:
    """Microseconds per call of ``fn`` (sync), CPU time of this thread."""
    c0 = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - c0) / n * 1e6


async def _timed(fn, seconds: float) -> tuple[float, float]:
    """(wall us, event-loop CPU us) per await of ``fn`` over ``seconds``."""
    n, w0, c0 = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - w0 < seconds:
        await fn()
        n += 1
    return (time.perf_counter() - w0) / n * 1e6, (time.thread_time() - c0) / n * 1e6


async def proof_costs(db, company, seconds: float) -> dict[str, tuple[float, float, str, float]]:
    """Per-call cost of the API key and OAuth bearer proofs (access/proofs.py, one tenant-transaction
    lookup each on the real database) and of a private_key_jwt client assertion at the token
    endpoint (access/client_jwt.py, joserfc), each next to its own floor: a dict lookup of the
    key's SHA-256 (API key); an HMAC-SHA256 and a joserfc HS256 JWT verify, what a self-contained
    token would cost at least (OAuth bearer); a raw cryptography ES256 verify (the assertion)."""
    import hmac
    import uuid
    import warnings

    from joserfc import jwk, jwt

    from ucp_gateway.access import client_jwt
    from ucp_gateway.access.credentials import add_credential, secret_hash
    from ucp_gateway.access.proofs import api_key_proof, bearer_proof
    from ucp_gateway.appkeys import CLOCK, DATABASE
    from ucp_gateway.db import tenant_tx
    from ucp_gateway.discovery.partners import add_partner

    now = SystemClock().now()
    await add_partner(db.pool, company.id, profile_url=PROFILE, role="buyer")
    _, key = await add_credential(db.pool, company.id, kind="api-key", profile_url=PROFILE, now=now)
    client, _ = await add_credential(db.pool, company.id, kind="oauth-client", profile_url=PROFILE, now=now)
    token = "ucpot_bench" + "x" * 32
    async with tenant_tx(db.pool, company.id) as conn:
        await conn.execute(
            "INSERT INTO oauth_access_tokens (company_id, token_hash, client_id, scope, issued_at, expires_at)"
            " VALUES ($1, $2, $3, 'ucp', $4, $5)",
            company.id, secret_hash(token), client.id, now, now + dt.timedelta(days=1),
        )  # fmt: skip

    class Req:  # what the proofs read of an aiohttp request
        def __init__(self, headers):
            self.headers, self.app = CIMultiDict(headers), {DATABASE: db, CLOCK: SystemClock()}

    table = {secret_hash(key): ("ak", PROFILE)}
    mac_key = b"k" * 32
    hs_key = jwk.OctKey.import_key(mac_key)
    hs_token = jwt.encode({"alg": "HS256"}, {"sub": "oc_x", "exp": 2**31}, hs_key, algorithms=["HS256"])
    out: dict[str, tuple[float, float, str, float]] = {}
    api_req, bearer_req = Req({"X-API-Key": key}), Req({"Authorization": f"Bearer {token}"})

    async def api() -> None:
        assert (await api_key_proof(api_req, company)) is not None

    async def bearer() -> None:
        assert (await bearer_proof(bearer_req, company)) is not None

    wall, cpu = await _timed(api, seconds)
    out["API key proof (X-API-Key)"] = (
        wall,
        cpu,
        "SHA-256 + dict lookup",
        _per_call(lambda: table.get(secret_hash(key))),
    )
    wall, cpu = await _timed(bearer, seconds)
    hmac_us = _per_call(lambda: hmac.compare_digest(hmac.new(mac_key, token.encode(), "sha256").digest(), b"0" * 32))
    jwt_us = _per_call(lambda: jwt.decode(hs_token, hs_key, algorithms=["HS256"]), 5000)
    out["OAuth bearer proof (opaque token)"] = (wall, cpu, "HMAC-SHA256", hmac_us)
    out["  same, against a JWT verify"] = (wall, cpu, "joserfc HS256 JWT verify", jwt_us)
    # private_key_jwt: the assertion's verify (pure), once per token request
    ec_key = jwk.ECKey.generate_key("P-256")
    jwks = client_jwt.check_jwks({**ec_key.as_dict(private=False), "kid": "b"})
    aud, t = "https://shop.example", int(time.time())
    signed = [jwt.encode({"alg": "ES256", "kid": "b"}, {"iss": "oc_b", "sub": "oc_b", "aud": aud, "exp": t + 60,
                                                       "jti": uuid.uuid4().hex}, ec_key, algorithms=["ES256"])
              for _ in range(64)]  # fmt: skip
    i = itertools.count()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ver_us = _per_call(lambda: client_jwt.verify_assertion(signed[next(i) % 64], jwks, client_id="oc_b",
                                                               audiences={aud}, now=t), 3000)  # fmt: skip
    msg = b"x" * 200
    sig = ec_key.private_key.sign(msg, ec.ECDSA(hashes.SHA256()))
    raw_us = _per_call(lambda: ec_key.public_key.verify(sig, msg, ec.ECDSA(hashes.SHA256())), 3000)
    out["private_key_jwt assertion verify"] = (ver_us, ver_us, "raw ES256 verify", raw_us)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    asyncio.run(main(ap.parse_args().seconds))

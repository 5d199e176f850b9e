"""Per-call cost of the Web Bot Auth and mTLS proofs, each against its floor (run by bench/verify.py).

- Web Bot Auth verification alone (``access.webbotauth.verify_web_bot_auth``: parse, freshness,
  coverage, the key from a warm directory cache, signature base, Ed25519 verify) on 64 distinct
  signed GETs, against a raw Ed25519 verify of the same bases;
- the whole Web Bot Auth proof per call (``web_bot_auth_proof``: + the nonce in the PostgreSQL replay
  store and the directory-registry lookup, one transaction each) on 400 freshly signed requests
  with new nonces, built before the clock starts;
- the mTLS proof of a forwarded RFC 9440 certificate from a trusted proxy (parse, fingerprint, one
  registry lookup) against its floor, the certificate's DER parse and SHA-256 fingerprint.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
from dataclasses import dataclass

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID
from http_message_signatures import HTTPMessageSigner, MappingKeyResolver, algorithms
from joserfc.jwk import OKPKey
from multidict import CIMultiDict

from ucp_gateway.access.credentials import add_credential
from ucp_gateway.access.identities import certificate_identities
from ucp_gateway.access.mtls import CLIENT_TRUST, ClientTrust, mtls_proof
from ucp_gateway.access.wba_directory import DIRECTORY_PATH, DirectoryFetcher, directory_keys
from ucp_gateway.access.webbotauth import DIRECTORY_FETCHER, verify_web_bot_auth, web_bot_auth_proof
from ucp_gateway.appkeys import CLOCK, DATABASE, REQ_RAW_BODY, SETTINGS
from ucp_gateway.clock import SystemClock
from ucp_gateway.httpsig import PgReplayStore
from ucp_gateway.httpsig.blocks import BlockCache
from ucp_gateway.httpsig.messages import request_view
from ucp_gateway.httpsig.rfc9421 import parse_signatures, signature_base
from ucp_gateway.httpsig.web import BLOCK_CACHE, REPLAY_STORE
from ucp_gateway.keys.rfc7638 import thumbprint

__all__ = ["wba_costs"]

POOL = 64
AGENT = "https://agent.example"
PATH = "/ucp/v1/orders/ord_1"
COVERED = ["@method", "@authority", "@path", "ucp-agent", '"signature-agent";key="sig1"']


@dataclass
class _Msg:
    method: str
    url: str
    headers: CIMultiDict


async def _per_call(fn, seconds: float) -> tuple[float, float]:
    """(wall us, event-loop CPU us) per ``await fn(i)`` over ``seconds``."""
    n, w0, c0 = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - w0 < seconds:
        await fn(n)
        n += 1
    return (time.perf_counter() - w0) / n * 1e6, (time.thread_time() - c0) / n * 1e6


def _floor_us(fn, n: int = 2000) -> float:
    t0 = time.thread_time()
    for i in range(n):
        fn(i)
    return (time.thread_time() - t0) / n * 1e6


class _Peer:  # the transport of a trusted proxy's connection
    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 40000) if name == "peername" else default


class _Bot:
    def __init__(self, profile: str):
        self.key = ed25519.Ed25519PrivateKey.generate()
        jwk = OKPKey.import_key(self.key).as_dict(private=False)
        jwk.pop("kid", None)
        self.jwk, self.kid, self.profile = jwk, thumbprint(jwk), profile
        resolver = MappingKeyResolver(public_keys={}, private_keys={self.kid: self.key})
        self.signer = HTTPMessageSigner(signature_algorithm=algorithms.ED25519, key_resolver=resolver)

    def headers(self, created: dt.datetime, nonce: str | None) -> CIMultiDict:
        h = CIMultiDict({"Host": "shop.example", "UCP-Agent": f'profile="{self.profile}"',
                         "Signature-Agent": f'sig1="{AGENT}"'})  # fmt: skip
        self.signer.sign(_Msg("GET", "https://shop.example" + PATH, h), key_id=self.kid, label="sig1",
                         created=created, expires=created + dt.timedelta(seconds=300), tag="web-bot-auth",
                         nonce=nonce, include_alg=False, covered_component_ids=COVERED)  # fmt: skip
        return h


def _request(app: web.Application, headers, transport=None) -> web.Request:
    kw = {"transport": transport} if transport is not None else {}
    req = make_mocked_request("GET", PATH, headers=headers, app=app, **kw)
    req[REQ_RAW_BODY] = b""
    return req


async def wba_costs(db, company, settings, profile: str, seconds: float) -> dict[str, tuple[float, float, str, float]]:
    """``{name: (wall us, CPU us, floor name, floor us)}``; ``profile``: a partner of ``company``."""
    bot = _Bot(profile)
    fetcher = DirectoryFetcher(settings)
    # the warm cache a bot's first request leaves behind
    fetcher.seed(AGENT + DIRECTORY_PATH, directory_keys({"keys": [bot.jwk]}), 86400)
    now = SystemClock().now()
    await add_credential(db.pool, company.id, kind="web-bot-auth", profile_url=profile, now=now, identity=AGENT)
    app = web.Application()
    app[SETTINGS], app[DATABASE], app[CLOCK] = settings, db, SystemClock()
    app[BLOCK_CACHE], app[REPLAY_STORE] = BlockCache(60.0), PgReplayStore(db.pool)
    app[DIRECTORY_FETCHER], app[CLIENT_TRUST] = fetcher, ClientTrust(settings)
    pool = []
    for i in range(POOL):
        req = _request(app, bot.headers(now - dt.timedelta(seconds=i % 16), None))
        sig = parse_signatures(req.headers["Signature-Input"], req.headers["Signature"])[0]
        pool.append((req, sig, signature_base(request_view(req, b"", "https"), sig)))
    pub = bot.key.public_key()
    out: dict[str, tuple[float, float, str, float]] = {}
    raw_us = _floor_us(lambda i: pub.verify(pool[i % POOL][1].signature, pool[i % POOL][2]))

    async def core(i: int) -> None:
        req, sig, _ = pool[i % POOL]
        await verify_web_bot_auth(req, company.id, sig, fetcher, now)

    wall, cpu = await _per_call(core, seconds)
    out["Web Bot Auth verify (warm directory)"] = (wall, cpu, "raw Ed25519 verify", raw_us)

    # freshly signed requests with new nonces, built before the clock starts (the client's part)
    fresh = [_request(app, bot.headers(dt.datetime.now(dt.UTC), f"w{i}-{time.time_ns()}")) for i in range(400)]

    async def whole(i: int) -> None:
        assert (await web_bot_auth_proof(fresh[i], company)).authenticated

    w0, c0 = time.perf_counter(), time.thread_time()
    for i in range(len(fresh)):
        await whole(i)
    wall, cpu = [(t / len(fresh)) * 1e6 for t in (time.perf_counter() - w0, time.thread_time() - c0)]
    out["Web Bot Auth proof (+replay, registry)"] = (wall, cpu, "raw Ed25519 verify", raw_us)

    ca_key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench platform")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
            .serial_number(1).not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
            .sign(ca_key, None))  # fmt: skip
    der = cert.public_bytes(serialization.Encoding.DER)
    await add_credential(db.pool, company.id, kind="mtls-cert", profile_url=profile, now=now,
                         identity=certificate_identities(cert)[0])  # fmt: skip
    settings.trusted_proxies = ["127.0.0.1/32"]
    mreq = _request(app, {"Client-Cert": ":" + base64.b64encode(der).decode() + ":"}, _Peer())

    async def mtls(_: int) -> None:
        assert (await mtls_proof(mreq, company)).authenticated

    floor = _floor_us(lambda i: certificate_identities(x509.load_der_x509_certificate(der)))
    wall, cpu = await _per_call(mtls, seconds)
    out["mTLS proof (forwarded certificate)"] = (wall, cpu, "DER parse + fingerprint", floor)
    await fetcher.close()
    return out

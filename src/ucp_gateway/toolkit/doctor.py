"""``ucp-gateway doctor URL``: check a UCP business or platform profile and the server behind it.

The checks are pure functions over what was fetched (:func:`check_fetch`, :func:`check_document`,
:func:`check_key`); :func:`run_doctor` fetches (no redirects), follows ``supported_versions``,
probes the advertised endpoints and, when asked, makes one signed create-checkout round trip with
a throwaway key whose platform profile it hosts on loopback. Each :class:`Finding` names the spec
section it comes from. Severities: ``error`` (a client will fail), ``warning`` (a client may
fail, or a SHOULD is missed), ``ok``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from joserfc.jwk import ECKey, OKPKey
from multidict import CIMultiDict

from ..discovery.profiles import PRIVATE_JWK_MEMBERS, validate_business_profile, validate_platform_profile
from ..errors import GatewayError
from ..httpsig.jwkalg import algorithm_for_jwk, public_key_from_jwk
from ..transports.agentkey import agent_key_from_jwk, generate_agent_jwk
from ..versions import VERSIONS
from .sign import agent_profile, send, sign_request, verify_response

__all__ = ["SEVERITY_EXIT", "Finding", "check_document", "check_fetch", "check_key", "run_doctor"]

#: Exit code of ``doctor`` by its worst finding.
SEVERITY_EXIT = {"ok": 0, "warning": 1, "error": 2}
_MAX = 1024 * 1024
_B64URL_43 = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "ok"
    check: str
    message: str
    spec: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _f(sev: str, check: str, msg: str, spec: str) -> Finding:
    return Finding(sev, check, msg, spec)


def check_fetch(url: str, status: int, headers: CIMultiDict[str], *, allow_http: bool = False) -> list[Finding]:
    """The hosting rules of a profile document: https, 200 without redirect, JSON, ``Cache-Control``
    public with a ``max-age``, an ``ETag``. UCP overview "Profile hosting" / "Fetching"."""
    out = []
    spec = "UCP overview, Fetching profiles"
    if not url.startswith("https://"):
        out.append(_f("warning" if allow_http else "error", "https", f"{url} is not https", spec))
    if 300 <= status < 400:
        out.append(_f("error", "redirect", f"answered {status} to {headers.get('Location')!r}: profiles are "
                      "fetched without following redirects", spec))  # fmt: skip
        return out
    if status != 200:
        out.append(_f("error", "status", f"answered {status}, not 200", spec))
        return out
    ctype = headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        out.append(_f("error", "media_type", f"Content-Type is {ctype or 'missing'}, not application/json", spec))
    cc = headers.get("Cache-Control", "")
    if not cc:
        out.append(_f("error", "cache_control", "no Cache-Control: platforms cannot know how long to keep it", spec))
    else:
        m = re.search(r"max-age=(\d+)", cc)
        if "no-store" in cc or m is None:
            out.append(_f("error", "cache_control", f"Cache-Control {cc!r} has no max-age", spec))
        elif int(m.group(1)) < 60:
            out.append(_f("warning", "cache_control", f"max-age {m.group(1)} s is under the 60 s floor", spec))
        if "private" in cc:
            out.append(_f("warning", "cache_control", "Cache-Control is private: shared caches cannot help", spec))
    if "ETag" not in headers:
        out.append(_f("warning", "etag", "no ETag: every refresh transfers the whole document", "RFC 9110 §8.8.3"))
    if all(f.check == "https" for f in out):
        out.append(_f("ok", "hosting", f"{url}: 200 application/json, {cc}", spec))
    return out


def check_key(jwk: Any, where: str) -> list[Finding]:
    """One published JWK: public only, a supported kty/crv whose point is on its curve, ``alg`` /
    ``use`` / ``key_ops`` consistent, and a kid that looks like an RFC 7638 thumbprint being one."""
    spec = "UCP signatures.md, Keys; RFC 7517 §4"
    if not isinstance(jwk, dict):
        return [_f("error", "key", f"{where}: a key is not a JSON object", spec)]
    kid = jwk.get("kid")
    name = f"{where} key {kid!r}"
    if PRIVATE_JWK_MEMBERS & jwk.keys():
        return [_f("error", "key_private", f"{name} publishes private key material", spec)]
    if not isinstance(kid, str) or not kid:
        return [_f("error", "key_kid", f"{where}: a key has no kid", spec)]
    try:
        algorithm_for_jwk(jwk)  # kty/crv in the registry, alg/use/key_ops consistent
        public_key_from_jwk(jwk)  # the point is on its curve (EC) / 32 bytes (Ed25519)
        key: Any = OKPKey.import_key(jwk) if jwk.get("kty") == "OKP" else ECKey.import_key(jwk)
    except GatewayError as exc:
        return [_f("error", "key_invalid", f"{name}: {exc.message}", spec)]
    except Exception as exc:  # joserfc's import errors
        return [_f("error", "key_invalid", f"{name}: {exc}", spec)]
    thumb = key.thumbprint()
    if _B64URL_43.fullmatch(kid) and kid != thumb:
        return [_f("warning", "key_thumbprint", f"{name} looks like an RFC 7638 thumbprint but is not this key's "
                   f"({thumb})", "RFC 7638 §3; UCP 2026-08-25 thumbprint keyids")]  # fmt: skip
    return [_f("ok", "key", f"{name}: {jwk.get('kty')} {jwk.get('crv')}, valid", spec)]


def check_document(doc: Any, *, kind: str, expect_version: str | None = None) -> list[Finding]:
    """The profile document: a ``ucp`` object of a known version, the key lists that version
    defines (2026-08-25: ``keys[]``; 2026-04-08: ``signing_keys``), ``supported_versions`` only on
    the root, ``spec`` on capability entries where the version requires it, and the official
    models the gateway validates with. ``kind``: ``business`` or ``platform``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("ucp"), dict):
        return [_f("error", "document", "not a JSON object with a ucp object", "UCP overview, Profile Structure")]
    ucp = doc["ucp"]
    version = ucp.get("version")
    out: list[Finding] = []
    spec = f"UCP {version} overview, Profile Structure"
    pv = VERSIONS.get(version) if isinstance(version, str) else None
    if expect_version is not None and version != expect_version:
        out.append(_f("error", "version", f"declares {version!r} where {expect_version} was expected", spec))
    if pv is None:
        out.append(_f("warning", "version", f"version {version!r} is not one this gateway serves", spec))
    else:
        lists = [m for m in pv.key_lists if isinstance(doc.get(m), list)]
        primary = next(iter(pv.key_lists))
        if kind == "business" and primary not in lists and any(isinstance(doc.get(m), list) for m in
                                                               ("keys", "signing_keys")):  # fmt: skip
            out.append(_f("error", "version_shape", f"a {version} profile lists its keys in {primary}[]", spec))
        if expect_version is not None and "supported_versions" in ucp:
            out.append(_f("error", "version_shape", "a supported_versions document carries supported_versions",
                          spec))  # fmt: skip
        if pv.spec_required:
            bare = [n for n, es in (ucp.get("capabilities") or {}).items()
                    if isinstance(es, list) and any(isinstance(e, dict) and "spec" not in e for e in es)]  # fmt: skip
            if bare:
                out.append(_f("error", "version_shape", f"{version} capability entries need spec: {', '.join(bare)}",
                              spec))  # fmt: skip
    root_model = next(iter(VERSIONS))
    if version == root_model:
        try:
            (validate_business_profile if kind == "business" else validate_platform_profile)(doc)
            out.append(_f("ok", "models", f"valid against the official {version} {kind} models", spec))
        except GatewayError as exc:
            out.append(_f("error", "models", exc.message, spec))
    for member in ("keys", "signing_keys"):
        keys = doc.get(member)
        if isinstance(keys, list):
            for jwk in keys:
                out += check_key(jwk, member)
    return out


async def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, CIMultiDict[str], bytes]:
    return await send("GET", url, {"Accept": "application/json", **(headers or {})}, b"", seconds=10)


async def _document(url: str, kind: str, allow_http: bool, expect: str | None, out: list[Finding]) -> Any:
    try:
        status, headers, body = await _get(url)
    except (aiohttp.ClientError, TimeoutError) as exc:
        out.append(_f("error", "reachable", f"{url}: {exc.__class__.__name__}", "UCP overview, Fetching profiles"))
        return None
    out += check_fetch(url, status, headers, allow_http=allow_http)
    if status != 200 or len(body) > _MAX:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        out.append(_f("error", "document", f"{url} is not JSON", "UCP overview, Profile Structure"))
        return None
    etag = headers.get("ETag")
    if etag:
        status2, _h, _b = await _get(url, {"If-None-Match": etag})
        if status2 != 304:
            out.append(_f("warning", "etag", f"If-None-Match with its own ETag answered {status2}, not 304",
                          "RFC 9110 §13.1.2"))  # fmt: skip
    out += check_document(doc, kind=kind, expect_version=expect)
    return doc


PROBE_ID = "doctor-probe"  # a checkout id nobody has: an existing REST binding answers 200 not_found or 401


def probe_url(endpoint: str, transport: Any) -> str:
    """What ``GET`` probes an advertised endpoint at: a REST binding's base is a prefix, not a
    resource (a real one may well answer 404), so its Get Checkout route is asked for an unknown
    id; any other transport's endpoint itself."""
    if transport == "rest":
        return endpoint.rstrip("/") + "/checkout-sessions/" + PROBE_ID
    return endpoint


def check_endpoint(name: str, transport: Any, url: str, status: int, ctype: str) -> Finding:
    """The finding for probing ``url`` (:func:`probe_url`): a 404 or 410 (nothing there) or a 5xx
    is an error whatever its media type; otherwise ok when JSON, a warning when not."""
    sev = "error" if status in (404, 410) or status >= 500 else "ok" if ctype == "application/json" else "warning"
    return _f(
        sev, "endpoint", f"{name} {transport} {url}: {status} {ctype or 'no media type'}", "UCP overview, Services"
    )


async def _endpoints(doc: dict, out: list[Finding]) -> list[str]:
    rest = []
    services = (doc.get("ucp") or {}).get("services") or {}
    for name, entries in services.items() if isinstance(services, dict) else ():
        for e in entries if isinstance(entries, list) else []:
            url = e.get("endpoint") if isinstance(e, dict) else None
            if not isinstance(url, str):
                continue
            probe = probe_url(url, e.get("transport"))
            try:
                status, headers, _b = await _get(probe)
            except (aiohttp.ClientError, TimeoutError) as exc:
                out.append(_f("error", "endpoint", f"{name} {e.get('transport')} {probe}: {exc.__class__.__name__}",
                              "UCP overview, Services"))  # fmt: skip
                continue
            out.append(
                check_endpoint(name, e.get("transport"), probe, status, headers.get("Content-Type", "").split(";")[0])
            )
            if e.get("transport") == "rest":
                rest.append(url)
    return rest


async def _roundtrip(doc: dict, rest: str, item: str, out: list[Finding]) -> None:
    """One signed create-checkout with a throwaway key whose profile is served on 127.0.0.1."""
    version = doc["ucp"].get("version")
    jwk = generate_agent_jwk("ES256")
    app = web.Application()
    runner = web.AppRunner(app)
    profile: dict[str, Any] = {}

    async def serve(_request: web.Request) -> web.Response:
        return web.json_response(profile, headers={"Cache-Control": "public, max-age=300"})

    app.router.add_get("/profile.json", serve)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        key = agent_key_from_jwk(jwk, f"http://127.0.0.1:{port}/profile.json")
        profile.update(
            agent_profile(key.public_jwk(), version=version if version in VERSIONS else next(iter(VERSIONS)))
        )
        url = rest.rstrip("/") + "/checkout-sessions"
        body = json.dumps({"line_items": [{"item": {"id": item}, "quantity": 1}]}).encode()
        now = dt.datetime.now(dt.UTC)
        headers = sign_request(key, "POST", url, CIMultiDict({"Content-Type": "application/json"}), body, now=now)
        status, rh, rbody = await send("POST", url, headers, body)
        spec = "UCP checkout-rest.md, Create Checkout; signatures.md"
        if status != 201:
            out.append(_f("error", "roundtrip", f"signed create-checkout answered {status}: {rbody[:200]!r}", spec))
            return
        out.append(_f("ok", "roundtrip", "signed create-checkout answered 201", spec))
        if "Signature" not in rh:
            out.append(_f("warning", "response_signature", "the answer is not signed although asked", spec))
            return
        keys = {k["kid"]: k for m in ("keys", "signing_keys") for k in doc.get(m) or [] if isinstance(k, dict)}
        rep = verify_response("POST", url, headers, body, status, rh, rbody, keys, now=now)
        sig = (rep["signatures"] or [{}])[0]
        if sig.get("looks_der_encoded"):
            out.append(_f("error", "response_signature", "the response signature is DER-encoded, not raw r||s",
                          "RFC 9421 §3.3.4"))  # fmt: skip
        elif rep["verdict"]["ok"]:
            out.append(_f("ok", "response_signature", f"verified with key {rep['verdict']['kid']}", spec))
        else:
            out.append(_f("error", "response_signature", f"{rep['verdict']['code']}: {rep['verdict']['content']}",
                          spec))  # fmt: skip
    finally:
        await runner.cleanup()


async def run_doctor(url: str, *, allow_http: bool = False, roundtrip_item: str | None = None) -> list[Finding]:
    """Every finding for the profile at ``url`` (a business's ``/.well-known/ucp`` or a platform
    profile), its ``supported_versions`` documents, endpoints and optional signed round trip."""
    out: list[Finding] = []
    kind = "business" if urlsplit(url).path.rstrip("/").endswith("/.well-known/ucp") else "platform"
    doc = await _document(url, kind, allow_http, None, out)
    if not isinstance(doc, dict) or not isinstance(doc.get("ucp"), dict):
        return out
    sv = doc["ucp"].get("supported_versions") or {}
    for version, doc_url in sv.items() if isinstance(sv, dict) else ():
        if isinstance(doc_url, str):
            await _document(doc_url, kind, allow_http, version, out)
    if kind == "business":
        rest = await _endpoints(doc, out)
        if roundtrip_item and rest:
            await _roundtrip(doc, rest[0], roundtrip_item, out)
    return out

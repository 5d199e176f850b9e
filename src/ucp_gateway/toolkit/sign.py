"""Signing a request as a UCP platform does, sending it, and checking the business's signed answer
(``ucp-gateway sign``); making an agent key and the platform profile that publishes it
(``ucp-gateway keys generate-agent``).

The request is signed by :class:`..transports.agentkey.AgentKey` (RFC 9421, ES256 or Ed25519, the
covered set UCP requires: ``@method @authority @path`` (+ ``@query``) ``ucp-agent``, and
``idempotency-key`` on mutating methods, ``content-digest content-type`` with a body, RFC 9530
sha-256 over the exact bytes sent). The response signature is checked against the keys of the
business profile at ``<origin>/.well-known/ucp`` (UCP signatures.md "Response signatures").
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict

from ..errors import BadRequest, ConfigError
from ..httpsig.policy import SignaturePolicy
from ..httpsig.resolver import keys_of_profile
from ..httpsig.rfc9421 import RequestView, ResponseView
from ..transports.agentkey import AgentKey
from ..versions import VERSIONS, capability_entries
from .inspect import inspect_message, required_for

__all__ = [
    "DEFAULT_ACCEPT_SIGNATURE",
    "agent_profile",
    "fetch_business_keys",
    "parse_headers",
    "read_data",
    "send",
    "sign_request",
    "target_url",
    "verify_response",
]

#: Asked of the business so its answer comes back signed (RFC 9421 §5.1; the gateway adds the
#: request binding of its own choosing).
DEFAULT_ACCEPT_SIGNATURE = 'sig1=("@status" "content-digest" "content-type")'
_MAX_PROFILE = 256 * 1024


def target_url(url: str) -> str:
    """The absolute URL to sign and send, curl-style: ``localhost:8080/x`` is ``http://localhost:8080/x``.
    Raises BadRequest unless it is http(s) with a host."""
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"not an http(s) URL with a host: {url[:80]!r}")
    return url if parts.path else url + "/"


def parse_headers(items: list[str]) -> CIMultiDict[str]:
    """curl-style ``-H 'Name: value'`` arguments. Raises BadRequest for one without a colon."""
    out: CIMultiDict[str] = CIMultiDict()
    for item in items:
        name, colon, value = item.partition(":")
        if not colon or not name.strip() or name != name.strip():
            raise BadRequest(f"-H takes 'Name: value', not {item[:40]!r}")
        out.add(name, value.strip())
    return out


def read_data(arg: str | None, stdin: Any = None) -> bytes:
    """curl-style ``-d``: ``@FILE`` (``@-`` standard input) or the literal text. Raises BadRequest."""
    if arg is None:
        return b""
    if arg.startswith("@"):
        if arg == "@-":
            return (stdin.buffer if hasattr(stdin, "buffer") else stdin).read()
        try:
            return Path(arg[1:]).expanduser().read_bytes()
        except OSError as exc:
            raise BadRequest(f"cannot read {arg[1:]}: {exc.strerror}") from None
    return arg.encode()


def sign_request(
    key: AgentKey,
    method: str,
    url: str,
    headers: CIMultiDict[str],
    body: bytes,
    *,
    now: dt.datetime,
    accept_signature: str | None = DEFAULT_ACCEPT_SIGNATURE,
) -> dict[str, str]:
    """Every header to send (``headers`` + ``UCP-Agent``, ``Idempotency-Key`` (a new UUID on a
    mutating method without one), ``Content-Type`` (``application/json`` with a body),
    ``Content-Digest``, ``Signature-Input``, ``Signature``, ``Accept-Signature``)."""
    h = CIMultiDict(headers)
    if method.upper() in ("POST", "PUT", "PATCH", "DELETE") and "Idempotency-Key" not in h:
        h["Idempotency-Key"] = str(uuid.uuid4())
    if accept_signature and "Accept-Signature" not in h:
        h["Accept-Signature"] = accept_signature
    return key.sign(method, url, dict(h.items()), body, now=now)


async def send(
    method: str, url: str, headers: dict[str, str], body: bytes, *, seconds: float = 30.0
) -> tuple[int, CIMultiDict[str], bytes]:
    """Send the request as signed (no redirects, no decompression: the response bytes are what the
    business signed). Returns ``(status, headers, body)``. Raises aiohttp.ClientError."""
    to = aiohttp.ClientTimeout(total=seconds)
    async with (
        aiohttp.ClientSession(timeout=to, auto_decompress=False) as session,
        session.request(method.upper(), url, headers=headers, data=body or None, allow_redirects=False) as resp,
    ):
        return resp.status, CIMultiDict(resp.headers), await resp.read()


async def fetch_business_keys(url: str, *, seconds: float = 10.0) -> dict[str, dict]:
    """``kid -> JWK`` of the business profile at ``<origin of url>/.well-known/ucp`` (``keys[]``
    and ``signing_keys``). No redirects (UCP overview "Fetching"). Raises ConfigError."""
    parts = urlsplit(url)
    profile = f"{parts.scheme}://{parts.netloc}/.well-known/ucp"
    try:
        status, _h, raw = await send("GET", profile, {"Accept": "application/json"}, b"", seconds=seconds)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ConfigError(f"cannot fetch the business profile {profile}: {exc.__class__.__name__}") from None
    if status != 200 or len(raw) > _MAX_PROFILE:
        raise ConfigError(f"the business profile {profile} answered {status}")
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ConfigError(f"the business profile {profile} is not JSON") from None
    return {k["kid"]: k for k in keys_of_profile(doc) if isinstance(k.get("kid"), str)}


def verify_response(
    method: str, url: str, req_headers: dict[str, str], req_body: bytes,
    status: int, headers: CIMultiDict[str], body: bytes, keys: dict[str, dict], *, now: dt.datetime,
) -> dict[str, Any]:  # fmt: skip
    """:func:`.inspect.inspect_message` of the response, bound to the request it answers."""
    request = RequestView(method.upper(), url, CIMultiDict(req_headers), req_body)
    view = ResponseView(status, headers, request, body)
    return inspect_message(view, keys, now=now, required=required_for(view), policy=SignaturePolicy())


def agent_profile(public_jwk: dict[str, Any], *, version: str, webhook_url: str | None = None) -> dict[str, Any]:
    """A UCP platform profile at ``version`` publishing ``public_jwk`` in every key list of that
    version that takes its key type (2026-08-25: ``keys[]``, plus the ``signing_keys`` mirror for
    P-256; 2026-04-08: ``signing_keys``, EC only), with the shopping capabilities the gateway
    implements and, given ``webhook_url``, the order capability's ``config.webhook_url``.
    Raises ConfigError for an unknown version or a key type the version cannot publish."""
    pv = VERSIONS.get(version)
    if pv is None:
        raise ConfigError(f"unknown UCP version {version!r} (served: {', '.join(VERSIONS)})")
    kind = (public_jwk.get("kty"), public_jwk.get("crv"))
    lists = {member: [public_jwk] for member, kinds in pv.key_lists.items() if kind in kinds}
    if not lists:
        raise ConfigError(f"UCP {version} profiles cannot publish a {kind[0]} {kind[1]} key")
    caps = capability_entries(version)
    if webhook_url:
        for name, entries in caps.items():
            if name.endswith(".order"):
                entries[0]["config"] = {"webhook_url": webhook_url}  # type: ignore[assignment]
    return {
        "ucp": {"version": version, "services": {}, "capabilities": caps, "payment_handlers": {}},
        **lists,
    }

"""Client of a remote gateway's verb front door (used by the stdio bridge and the remote CLI).

- ``GET /api/v1/agent/verbs?surface=S[&shape=]``: the manifest, cached ``cache_ttl`` seconds
  (default 300, solid-verbs transport.md "refreshes every 5 minutes"), revalidated with ETag.
- ``POST /api/v1/agent/dispatch`` with ``{verb, args, confirm, typed_phrase?, nonce?,
  idempotency_key?}`` and the ``Verb-Surface`` header; authenticated by a staff bearer token or
  an RFC 9421 signature with the agent key (:mod:`.agentkey`), or anonymous (reads only).

Every answer is an envelope: transport failures (connection refused, timeouts, non-JSON bodies)
become ``{ok:false, error:{reason:"gateway_unreachable"|"gateway_error"}}`` so the caller always
gets the same shape.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp

from ..clock import Clock, SystemClock
from ..errors import BadRequest
from .agentkey import AgentKey
from .auth import SURFACE_HEADER

__all__ = ["DISPATCH_PATH", "MANIFEST_PATH", "GatewayClient", "check_gateway_url"]

MANIFEST_PATH = "/api/v1/agent/verbs"
DISPATCH_PATH = "/api/v1/agent/dispatch"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def check_gateway_url(url: str) -> str:
    """The gateway base URL without a trailing slash. Raises BadRequest unless ``https://host``
    (plain ``http`` only on loopback: credentials never travel in clear text over a network)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise BadRequest(f"--gateway must be an http(s) base URL, got {url!r}")
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
        raise BadRequest("--gateway must use https (plain http only for localhost / 127.0.0.1)")
    return url.rstrip("/")


def _envelope(verb: str, reason: str, message: str) -> dict[str, Any]:
    return {"ok": False, "verb": verb, "error": {"reason": reason, "message": message}}


class GatewayClient:
    """One remote gateway. Use as ``async with GatewayClient(url, surface="cli") as gw``.

    Args:
        base_url: ``https://shop.example`` (the company's host). surface: the ``Verb-Surface``.
        token: staff bearer token. key: agent signing key. cache_ttl: manifest cache seconds.
        clock: wall clock for signature ``created``; monotonic: cache time source.
    """

    def __init__(
        self,
        base_url: str,
        *,
        surface: str,
        token: str | None = None,
        key: AgentKey | None = None,
        cache_ttl: float = 300.0,
        timeout: float = 30.0,
        clock: Clock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.base = check_gateway_url(base_url)
        self.surface, self.token, self.key = surface, token, key
        self.cache_ttl, self.timeout = cache_ttl, timeout
        self.clock, self.monotonic = clock or SystemClock(), monotonic
        self._http: aiohttp.ClientSession | None = None
        self._cache: dict[Any, tuple[float, str | None, list[dict[str, Any]]]] = {}
        self.manifest_fetches = 0  # observable for tests and diagnostics

    async def __aenter__(self) -> GatewayClient:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    @property
    def authenticated(self) -> bool:
        return bool(self.token or self.key)

    async def manifest(self, *, shape: str | None = None) -> list[dict[str, Any]]:
        """The VerbRecords for this surface (cached). Raises BadRequest if the gateway cannot answer."""
        assert self._http is not None
        ck = shape
        now = self.monotonic()
        hit = self._cache.get(ck)
        if hit is not None and now - hit[0] < self.cache_ttl:
            return hit[2]
        q = ({"surface": self.surface} if self.surface else {}) | ({"shape": shape} if shape else {})
        headers = {"Accept": "application/json"}
        if hit is not None and hit[1]:
            headers["If-None-Match"] = hit[1]
        try:
            async with self._http.get(f"{self.base}{MANIFEST_PATH}?{urlencode(q)}", headers=headers) as resp:
                self.manifest_fetches += 1
                if resp.status == 304 and hit is not None:
                    self._cache[ck] = (now, hit[1], hit[2])
                    return hit[2]
                body = await resp.read()
                if resp.status != 200:
                    raise BadRequest(f"the gateway answered {resp.status} for the manifest")
                records = json.loads(body)
                etag = resp.headers.get("ETag")
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise BadRequest(f"cannot read the manifest from {self.base}: {exc.__class__.__name__}") from None
        if not isinstance(records, list):
            raise BadRequest("the manifest is not a JSON array")
        self._cache[ck] = (now, etag, records)
        return records

    async def dispatch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST one call; returns the envelope (never raises for gateway or network failures)."""
        assert self._http is not None
        verb = str(body.get("verb", "?"))
        raw = json.dumps(dict(body), separators=(",", ":")).encode()
        url = f"{self.base}{DISPATCH_PATH}"
        headers = {"Content-Type": "application/json", "Accept": "application/json", SURFACE_HEADER: self.surface}
        headers["Idempotency-Key"] = str(body.get("idempotency_key") or secrets.token_hex(8))
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        elif self.key is not None:
            headers = self.key.sign("POST", url, headers, raw, now=self.clock.now())
        try:
            async with self._http.post(url, data=raw, headers=headers) as resp:
                text = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _envelope(verb, "gateway_unreachable", f"cannot reach {self.base}: {exc.__class__.__name__}")
        try:
            env = json.loads(text)
        except (ValueError, UnicodeDecodeError):
            env = None
        if isinstance(env, dict) and isinstance(env.get("ok"), bool):
            return env
        if isinstance(env, dict) and isinstance(env.get("code"), str):  # a protocol error body
            return _envelope(verb, env["code"], str(env.get("content", ""))[:500])
        return _envelope(verb, "gateway_error", f"the gateway answered HTTP {status} without an envelope")

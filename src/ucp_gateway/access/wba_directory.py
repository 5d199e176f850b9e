"""Web Bot Auth key directories: fetched under the profile fetcher's rules, cached per URL.

A signer names its key directory in ``Signature-Agent`` (draft-meunier-http-message-signatures-
directory): ``<origin>/.well-known/http-message-signatures-directory``, served as
``application/http-message-signatures-directory+json``, a JWK Set. The outbound rules are the
platform-profile fetcher's (``discovery.fetcher``, settings ``profile_fetch_*`` /
``profile_cache_*``): the one SSRF policy (:func:`~ucp_gateway.discovery.ssrf.check_target` before
the request, :func:`~ucp_gateway.discovery.ssrf.guarded_session` at connect time), https only
(plain http for the dev allowlist in development), no redirects, connect/read timeouts, a body cap,
a TTL between the floor and the cap honouring ``Cache-Control: max-age``, single flight per URL, a
forced refresh on an unknown keyid at most once per TTL floor per URL, a stale copy served up to
``profile_stale_if_error`` past expiry when a refresh fails, and a backoff after a failure.

Keys are indexed by their RFC 7638 thumbprint, recomputed here (a ``kid`` member is ignored):
Ed25519 (OKP, RFC 8037) and P-256 only; a key of another type, or not on its curve, is skipped.

Errors: :class:`DirectoryUnavailable` (503, ``directory_unavailable``: timeout, connection refused,
a 5xx; our outage as far as the caller is concerned, retry later) and :class:`DirectoryInvalid`
(401, ``key_not_found``: the named key source does not serve keys: a 4xx, a redirect, a special-use
address, an unresolvable host, a wrong media type, not a JWK Set).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..clock import Clock, SystemClock
from ..config import Settings
from ..discovery.caching import cache_ttl
from ..discovery.ssrf import BlockedAddress, HostResolver, RefusedUrl, check_target, dev_allowlist, guarded_session
from ..errors import ServiceUnavailable, Unauthorized
from ..httpsig.jwkalg import public_key_from_jwk
from ..jsonbody import InvalidJson, loads_strict
from ..keys.rfc7638 import thumbprint
from ..logs import get_logger

__all__ = [
    "DIRECTORY_MEDIA_TYPE",
    "DIRECTORY_PATH",
    "DirectoryFetcher",
    "DirectoryInvalid",
    "DirectoryUnavailable",
    "directory_keys",
]

DIRECTORY_PATH = "/.well-known/http-message-signatures-directory"
DIRECTORY_MEDIA_TYPE = "application/http-message-signatures-directory+json"
USER_AGENT = "ucp-gateway/0.1 (+web-bot-auth-directory)"
_ACCEPTED_CURVES = {("OKP", "Ed25519"), ("EC", "P-256")}
_log = get_logger("ucp_gateway.access.webbotauth")


class DirectoryUnavailable(ServiceUnavailable):
    code = "directory_unavailable"


class DirectoryInvalid(Unauthorized):
    code = "key_not_found"


def directory_keys(doc: Any) -> dict[str, dict[str, Any]]:
    """``{thumbprint: public JWK}`` of a JWK Set (``{"keys": [...]}``), Ed25519 and P-256 keys only.
    Raises DirectoryInvalid when ``doc`` is not a JWK Set or holds no usable key."""
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list):
        raise DirectoryInvalid("the key directory is not a JWK Set")
    out: dict[str, dict[str, Any]] = {}
    for jwk in keys:
        if not isinstance(jwk, dict) or (jwk.get("kty"), jwk.get("crv")) not in _ACCEPTED_CURVES or "d" in jwk:
            continue
        try:
            public_key_from_jwk(jwk)  # on the curve, right sizes
            out[thumbprint(jwk)] = {k: v for k, v in jwk.items() if k in ("kty", "crv", "x", "y", "alg")}
        except Exception:  # noqa: S112 - a malformed key is skipped, never a 500
            continue
    if not out:
        raise DirectoryInvalid("the key directory holds no Ed25519 or P-256 key")
    return out


@dataclass(slots=True)
class _Entry:
    keys: dict[str, dict[str, Any]]
    expires_at: float  # UTC seconds


class DirectoryFetcher:
    """Fetches and caches key directories (see the module docstring). ``await close()`` when done."""

    def __init__(self, settings: Settings, *, clock: Clock | None = None, resolver: HostResolver | None = None):
        self._s = settings
        self._clock = clock or SystemClock()
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._retry_at: OrderedDict[str, tuple[float, Exception]] = OrderedDict()
        self._forced: OrderedDict[str, float] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[_Entry]] = {}
        self.fetch_count = 0  # network fetches started (tests, bench)

    async def key(self, url: str, keyid: str) -> dict[str, Any] | None:
        """The public JWK whose thumbprint is ``keyid`` in the directory at ``url``, or None.
        An unknown keyid refetches the directory at most once per TTL floor. Raises the errors of
        the module docstring when no usable copy exists."""
        entry = await self._entry(url)
        jwk = entry.keys.get(keyid)
        if jwk is not None:
            return jwk
        now = self._now()
        last = self._forced.get(url)
        if last is not None and now - last < self._s.profile_cache_ttl_floor:
            return None
        self._put(self._forced, url, now)
        try:
            entry = await self._single_flight(url)
        except (DirectoryUnavailable, DirectoryInvalid):
            return None
        return entry.keys.get(keyid)

    def purge(self, url: str) -> None:
        self._cache.pop(url, None)
        self._retry_at.pop(url, None)
        self._forced.pop(url, None)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _now(self) -> float:
        return self._clock.now().timestamp()

    def _put(self, d: OrderedDict, key: str, value: Any) -> None:
        d[key] = value
        d.move_to_end(key)
        while len(d) > self._s.profile_cache_size:
            d.popitem(last=False)

    async def _entry(self, url: str) -> _Entry:
        now = self._now()
        entry = self._cache.get(url)
        if entry is not None and now < entry.expires_at:
            return entry
        try:
            failed = self._retry_at.get(url)
            if failed is not None and now < failed[0]:
                raise type(failed[1])(f"{failed[1]} (retrying later)")
            return await self._single_flight(url)
        except DirectoryUnavailable:
            if entry is not None and now < entry.expires_at + self._s.profile_stale_if_error:
                return entry
            raise

    async def _single_flight(self, url: str) -> _Entry:
        fut = self._inflight.get(url)
        if fut is None:
            fut = asyncio.ensure_future(self._fetch(url))
            self._inflight[url] = fut
            fut.add_done_callback(lambda f, u=url: self._done(u, f))
        return await asyncio.shield(fut)

    def _done(self, url: str, fut: asyncio.Future[_Entry]) -> None:
        if self._inflight.get(url) is fut:
            del self._inflight[url]
        if not fut.cancelled():
            fut.exception()  # retrieved even when every waiter went away

    async def _fetch(self, url: str) -> _Entry:
        try:
            keys, ttl = await self._exchange(url)
        except (DirectoryUnavailable, DirectoryInvalid) as exc:
            self._put(self._retry_at, url, (self._now() + self._s.profile_fetch_backoff_base, exc))
            raise
        self._retry_at.pop(url, None)
        entry = _Entry(keys, self._now() + ttl)
        self._put(self._cache, url, entry)
        return entry

    async def _exchange(self, url: str) -> tuple[dict[str, dict[str, Any]], float]:
        s = self._s
        dev_hosts = dev_allowlist(s)
        try:
            check_target(url, dev_hosts=dev_hosts, what="key directory")
        except RefusedUrl as exc:
            raise DirectoryInvalid(str(exc)) from None
        if self._session is None or self._session.closed:
            self._session = guarded_session(dev_hosts=dev_hosts, resolver=self._resolver, limit=100)
        timeout = aiohttp.ClientTimeout(
            total=s.profile_fetch_connect_timeout + s.profile_fetch_read_timeout,
            sock_connect=s.profile_fetch_connect_timeout,
            sock_read=s.profile_fetch_read_timeout,
        )
        headers = {"Accept": f"{DIRECTORY_MEDIA_TYPE}, application/json;q=0.5", "User-Agent": USER_AGENT}
        self.fetch_count += 1
        try:
            async with self._session.get(url, allow_redirects=False, headers=headers, timeout=timeout) as resp:
                if resp.status >= 500:
                    raise DirectoryUnavailable(f"the key directory answered HTTP {resp.status}")
                if resp.status != 200:
                    raise DirectoryInvalid(f"the key directory answered HTTP {resp.status}")
                body = await _read_capped(resp, s.profile_fetch_max_bytes)
                media = resp.content_type
                cache_control = resp.headers.get("Cache-Control")
        except TimeoutError:
            raise DirectoryUnavailable("the key directory did not answer in time") from None
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, BlockedAddress) or isinstance(exc, aiohttp.ClientConnectorDNSError):
                raise DirectoryInvalid("the key directory host is refused or cannot be resolved") from None
            raise DirectoryUnavailable("cannot connect to the key directory") from None
        except aiohttp.ClientError as exc:
            raise DirectoryUnavailable(f"key directory fetch failed: {type(exc).__name__}") from None
        if media != DIRECTORY_MEDIA_TYPE:
            if media != "application/json":
                raise DirectoryInvalid(f"the key directory is served as {media or 'no media type'}")
            # plain JSON changes nothing we read: accepted, counted in the log
            _log.warning("wba_directory_media_type", url=url, media_type=media)
        try:
            doc = loads_strict(body)
        except InvalidJson:
            raise DirectoryInvalid("the key directory is not JSON") from None
        keys = directory_keys(doc)
        return keys, cache_ttl(cache_control, floor=s.profile_cache_ttl_floor, cap=s.profile_cache_ttl_max)


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    if resp.content_length is not None and resp.content_length > cap:
        raise DirectoryInvalid(f"the key directory is larger than {cap} bytes")
    chunks, size = [], 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > cap:
            raise DirectoryInvalid(f"the key directory is larger than {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)

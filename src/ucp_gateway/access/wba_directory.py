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
``profile_stale_if_error`` past expiry when a refresh fails, and a backoff after a failure
(``profile_fetch_backoff_base``); the cache, single flight, backoff and stale copy are
:class:`ucp_gateway.flightcache.FlightCache`.

Keys are indexed by their RFC 7638 thumbprint, recomputed here (a ``kid`` member is ignored):
Ed25519 (OKP, RFC 8037) and P-256 only; a key of another type, or not on its curve, is skipped.

Errors: :class:`DirectoryUnavailable` (503, ``directory_unavailable``: timeout, connection refused,
a 5xx; our outage as far as the caller is concerned, retry later) and :class:`DirectoryInvalid`
(401, ``key_not_found``: the named key source does not serve keys: a 4xx, a redirect, a special-use
address, an unresolvable host, a wrong media type, not a JWK Set).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import aiohttp

from ..clock import Clock, SystemClock
from ..config import Settings
from ..discovery.caching import cache_ttl
from ..discovery.ssrf import (
    BlockedAddress,
    HostResolver,
    RefusedUrl,
    check_target,
    dev_allowlist,
    fetch_timeout,
    guarded_session,
)
from ..errors import ServiceUnavailable, Unauthorized
from ..flightcache import FlightCache, put_lru
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


class DirectoryFetcher:
    """Fetches and caches key directories (see the module docstring). ``await close()`` when done."""

    def __init__(self, settings: Settings, *, clock: Clock | None = None, resolver: HostResolver | None = None):
        self._s = settings
        self._clock = clock or SystemClock()
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._flights: FlightCache[dict[str, dict[str, Any]]] = FlightCache(
            self._exchange,
            now=self._now,
            size=settings.profile_cache_size,
            stale_if_error=settings.profile_stale_if_error,
            backoff=lambda _n: settings.profile_fetch_backoff_base,
            stale_on=(DirectoryUnavailable,),  # a directory that answers "no keys" is not served stale
        )
        self._forced: OrderedDict[str, float] = OrderedDict()
        self.fetch_count = 0  # network fetches started (tests, bench)

    async def key(self, url: str, keyid: str) -> dict[str, Any] | None:
        """The public JWK whose thumbprint is ``keyid`` in the directory at ``url``, or None.
        An unknown keyid refetches the directory at most once per TTL floor. Raises the errors of
        the module docstring when no usable copy exists."""
        keys = await self._flights.get(url)
        jwk = keys.get(keyid)
        if jwk is not None:
            return jwk
        now = self._now()
        last = self._forced.get(url)
        if last is not None and now - last < self._s.profile_cache_ttl_floor:
            return None
        put_lru(self._forced, url, now, self._s.profile_cache_size)
        try:
            keys = await self._flights.refresh(url)
        except (DirectoryUnavailable, DirectoryInvalid):
            return None
        return keys.get(keyid)

    def seed(self, url: str, keys: dict[str, dict[str, Any]], ttl: float) -> None:
        """Cache ``keys`` (of :func:`directory_keys`) for ``url`` for ``ttl`` seconds: the warm
        cache a signer's first request leaves behind (bench)."""
        self._flights.put(url, keys, ttl)

    def purge(self, url: str) -> None:
        self._flights.purge(url)
        self._forced.pop(url, None)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _now(self) -> float:
        return self._clock.now().timestamp()

    async def _exchange(self, url: str, _previous: Any = None) -> tuple[dict[str, dict[str, Any]], float]:
        """One guarded GET of the directory at ``url``: (its keys, their TTL in seconds)."""
        s = self._s
        dev_hosts = dev_allowlist(s)
        try:
            check_target(url, dev_hosts=dev_hosts, what="key directory")
        except RefusedUrl as exc:
            raise DirectoryInvalid(str(exc)) from None
        if self._session is None or self._session.closed:
            self._session = guarded_session(dev_hosts=dev_hosts, resolver=self._resolver, limit=100)
        timeout = fetch_timeout(s)
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

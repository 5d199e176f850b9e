"""Platform-profile fetcher: the gateway's main outbound surface (UCP overview "Fetching").

Rules implemented (settings in brackets):
- https only; plain http only for hosts on the dev allowlist in development [dev_profile_hosts];
- SSRF guard: special-use addresses refused, connection made to the checked address (``ssrf``: the
  one outbound policy, :func:`.ssrf.check_target` before the request, :func:`.ssrf.guarded_session`);
- no redirects; connect and read timeouts [profile_fetch_connect_timeout, _read_timeout];
- body cap [profile_fetch_max_bytes], enforced on the decoded stream;
- LRU cache [profile_cache_size] with a TTL floor [profile_cache_ttl_floor] that honours a longer
  ``Cache-Control: max-age`` up to [profile_cache_ttl_max]; conditional refresh with If-None-Match;
- single-flight: concurrent requests for one URL share one fetch;
- exponential backoff after failures [profile_fetch_backoff_base, _max];
- forced refresh on an unknown kid at most once per TTL floor per origin;
- a failed refresh never evicts a good cached copy; it is served up to [profile_stale_if_error]
  seconds past expiry.
The cache, single flight, backoff and stale copy are :class:`ucp_gateway.flightcache.FlightCache`.

It implements the signature middleware's key-resolver protocol (:meth:`ProfileFetcher.resolve`).
:meth:`ProfileFetcher.fetch_document` fetches a JSON document under the same rules without the
schema, the cache or the backoff (the order-webhook worker reads profiles the ucp-sdk model refuses).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from ..clock import Clock, SystemClock
from ..config import Settings
from ..errors import GatewayError
from ..flightcache import FlightCache, put_lru
from ..jsonbody import InvalidJson, loads_strict
from .agent_header import validate_profile_url
from .caching import cache_ttl
from .errors import InvalidProfileUrl, ProfileMalformed, ProfileUnreachable
from .profiles import PlatformProfile, parse_platform_profile
from .ssrf import BlockedAddress, HostResolver, RefusedUrl, check_target, dev_allowlist, fetch_timeout, guarded_session

__all__ = ["USER_AGENT", "ProfileFetcher"]

USER_AGENT = "ucp-gateway/0.1 (+profile-fetcher)"


def _origin(url: str) -> str:
    p = urlsplit(url)
    return f"{p.scheme.lower()}://{(p.hostname or '').lower()}:{p.port or (443 if p.scheme == 'https' else 80)}"


class ProfileFetcher:
    """Fetches, validates and caches platform profiles.

    Args:
        settings: gateway settings (see module docstring for the fields used).
        clock: time source for TTLs, backoff and refresh throttling.
        resolver: name-resolution seam ``async (host, port) -> [ip]`` (default: the OS resolver).
    Use ``await fetcher.close()`` when done (``setup`` registers that on the app).
    """

    def __init__(self, settings: Settings, *, clock: Clock | None = None, resolver: HostResolver | None = None):
        self._s = settings
        self._clock = clock or SystemClock()
        self._dev_hosts = dev_allowlist(settings)
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        # failures are bounded like the cache: every URL a caller names can fail once (forgetting one
        # only shortens its backoff)
        self._flights: FlightCache[PlatformProfile] = FlightCache(
            self._fetch,
            now=self._now,
            size=settings.profile_cache_size,
            stale_if_error=settings.profile_stale_if_error,
            backoff=lambda n: min(
                settings.profile_fetch_backoff_max, settings.profile_fetch_backoff_base * 2 ** (n - 1)
            ),
        )
        self._forced: OrderedDict[str, float] = OrderedDict()
        self.fetch_count = 0  # network fetches started (for tests and the bench)

    # -- key-resolver protocol --------------------------------------------------------------
    async def resolve(self, profile_url: str, kid: str, *, force_refresh: bool = False) -> dict[str, Any] | None:
        """The public JWK with ``kid`` from the profile's ``signing_keys``/``keys``, or None.

        On an unknown kid (or ``force_refresh``) the profile is re-fetched, at most once per TTL floor
        per origin (UCP signatures.md "Key lookup" step 3); a failed refresh keeps the cached copy.
        Raises: the profile errors of :meth:`get_profile` when no usable copy exists.
        """
        profile = await self.get_profile(profile_url)
        key = profile.key(kid)
        if key is not None and not force_refresh:
            return key
        origin, now = _origin(profile_url), self._now()
        last = self._forced.get(origin)
        if last is not None and now - last < self._s.profile_cache_ttl_floor:
            return key
        put_lru(self._forced, origin, now, self._s.profile_cache_size)
        try:
            fresh = await self._flights.refresh(profile_url)
        except GatewayError:
            return key
        return fresh.key(kid)

    async def get_profile(self, url: str) -> PlatformProfile:
        """The validated platform profile at ``url``, from cache when fresh.

        Raises: InvalidProfileUrl (400), ProfileUnreachable (424), ProfileMalformed (422).
        """
        validate_profile_url(url, http_hosts=self._dev_hosts)
        return await self._flights.get(url)

    async def fetch_document(self, url: str) -> Any:
        """The JSON document at ``url``, fetched now under the fetcher's rules (URL policy, SSRF
        guard, no redirects, timeouts, body cap) but neither validated against the platform schema
        nor cached, and without the backoff of :meth:`get_profile`.

        Raises: InvalidProfileUrl (400: the URL policy or a special-use address), ProfileUnreachable
            (424: timeout, connection, redirect, non-200), ProfileMalformed (422: too large, not JSON).
        """
        status, _, body = await self._exchange(url, {"Accept": "application/json", "Accept-Encoding": "identity"})
        if status != 200 or body is None:
            raise ProfileUnreachable(f"profile fetch answered HTTP {status}")
        try:
            return loads_strict(body)  # the gateway's one reading of untrusted JSON (depth, NaN, repeats)
        except InvalidJson:
            raise ProfileMalformed("profile is not JSON") from None

    def purge(self, url: str) -> None:
        """Forget the cached copy of ``url`` and any backoff after a failure: the next lookup fetches
        it again (an operator's purge, httpsig.blocks). Its origin may be refreshed again at once."""
        self._flights.purge(url)
        self._forced.pop(_origin(url), None)

    def cached(self, url: str) -> PlatformProfile | None:
        """The cached copy (fresh or stale) without any I/O."""
        return self._flights.cached(url)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- internals -------------------------------------------------------------------------
    def _now(self) -> float:
        return self._clock.now().timestamp()

    def _session_for_loop(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = guarded_session(dev_hosts=self._dev_hosts, resolver=self._resolver, limit=100)
        return self._session

    async def _fetch(self, url: str, previous: PlatformProfile | None) -> tuple[PlatformProfile, float]:
        s = self._s
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if previous is not None and previous.etag:
            headers["If-None-Match"] = previous.etag
        status, resp_headers, body = await self._exchange(url, headers)
        ttl = cache_ttl(resp_headers.get("Cache-Control"), floor=s.profile_cache_ttl_floor, cap=s.profile_cache_ttl_max)
        if status == 304 and previous is not None:
            return previous, ttl
        if status != 200 or body is None:
            raise ProfileUnreachable(f"profile fetch answered HTTP {status}")
        return parse_platform_profile(url, body, etag=resp_headers.get("ETag")), ttl

    async def _exchange(self, url: str, headers: dict[str, str]) -> tuple[int, Mapping[str, str], bytes | None]:
        """One guarded GET: (status, response headers, body of a 200 read under the cap, else None).

        Raises: InvalidProfileUrl, ProfileUnreachable (a redirect other than 304 among them),
            ProfileMalformed (body over the cap).
        """
        try:
            check_target(url, dev_hosts=self._dev_hosts, what="profile")
        except RefusedUrl as exc:
            raise InvalidProfileUrl(str(exc)) from None
        s = self._s
        timeout = fetch_timeout(s)
        self.fetch_count += 1
        try:
            async with self._session_for_loop().get(
                url, allow_redirects=False, headers={**headers, "User-Agent": USER_AGENT}, timeout=timeout
            ) as resp:
                if 300 <= resp.status < 400 and resp.status != 304:
                    raise ProfileUnreachable(
                        f"profile fetch answered a redirect ({resp.status}); redirects are refused"
                    )
                body = await _read_capped(resp, s.profile_fetch_max_bytes) if resp.status == 200 else None
                return resp.status, resp.headers, body
        except TimeoutError:
            raise ProfileUnreachable("profile fetch timed out") from None
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, BlockedAddress):
                raise InvalidProfileUrl("profile host resolves to a special-use address") from None
            if isinstance(exc, aiohttp.ClientConnectorDNSError):
                raise InvalidProfileUrl("profile host cannot be resolved") from None
            raise ProfileUnreachable("cannot connect to the profile host") from None
        except aiohttp.ClientError as exc:
            raise ProfileUnreachable(f"profile fetch failed: {type(exc).__name__}") from None


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """Read at most ``cap`` bytes; stop and raise ProfileMalformed as soon as the body is larger."""
    if resp.content_length is not None and resp.content_length > cap:
        raise ProfileMalformed(f"profile larger than {cap} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > cap:
            raise ProfileMalformed(f"profile larger than {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)

"""Key lookup for callers: the ``KeyResolver`` interface and two small implementations.

The discovery package implements :class:`KeyResolver` with its platform-profile fetcher. Here:
``StaticKeyResolver`` (unit tests) and ``ProfileKeyResolver``, a minimal in-process fetcher of
platform profiles used by tests against a real local profile server (UCP overview, "Fetching":
no redirects, timeouts, cache >= 60 s, forced refresh at most once per TTL floor per origin).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import aiohttp

__all__ = ["KeyResolver", "ProfileKeyResolver", "StaticKeyResolver", "keys_of_profile"]


@runtime_checkable
class KeyResolver(Protocol):
    """Resolves a caller's public JWK by profile URL and ``kid``.

    ``resolve`` returns the public JWK dict (``kty``, ``crv``, ``x``, ``y``, ``kid``...) listed in
    the profile's ``signing_keys`` (or ``keys``), or None when the profile does not list ``kid``.
    ``force_refresh=True`` asks for a fresh fetch (the implementation rate-limits it per origin).
    Fetch failures raise the discovery errors (``profile_unreachable``...), never return None.
    """

    async def resolve(self, profile_url: str, kid: str, *, force_refresh: bool = False) -> dict | None: ...


def keys_of_profile(profile: Any) -> list[dict]:
    """JWKs of a UCP profile: top-level ``signing_keys`` (2026-04-08) and ``keys`` (HEAD)."""
    if not isinstance(profile, dict):
        return []
    out: list[dict] = []
    for name in ("signing_keys", "keys"):
        val = profile.get(name)
        if isinstance(val, list):
            out += [k for k in val if isinstance(k, dict)]
    return out


class StaticKeyResolver:
    """Fixed ``{profile_url: [jwk, ...]}`` (or ``{profile_url: {kid: jwk}}``) for unit tests."""

    def __init__(self, profiles: Mapping[str, Any]):
        self._by = {}
        for url, keys in profiles.items():
            items = keys.values() if isinstance(keys, Mapping) else keys
            self._by[url] = {k["kid"]: dict(k) for k in items}
        self.calls: deque[tuple[str, str, bool]] = deque(maxlen=1000)  # recent lookups, for tests

    async def resolve(self, profile_url: str, kid: str, *, force_refresh: bool = False) -> dict | None:
        self.calls.append((profile_url, kid, force_refresh))
        return self._by.get(profile_url, {}).get(kid)


@dataclass(slots=True)
class _Entry:
    keys: dict[str, dict]
    fetched: float


class ProfileKeyResolver:
    """Fetches platform profiles over HTTP(S) and caches their keys.

    Args:
        session: an aiohttp ClientSession owned by the caller.
        ttl: cache lifetime in seconds (>= 60 per UCP "Fetching").
        refresh_floor: minimum seconds between forced refreshes of one origin.
        monotonic: clock for cache ages (injectable for tests).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        ttl: float = 300.0,
        refresh_floor: float = 60.0,
        timeout: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self._session = session
        self._ttl, self._floor, self._timeout = ttl, refresh_floor, timeout
        self._now = monotonic
        self._cache: dict[str, _Entry] = {}
        self._last_forced: dict[str, float] = {}
        self.fetches = 0

    async def _fetch(self, url: str) -> _Entry:
        self.fetches += 1
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        async with self._session.get(url, allow_redirects=False, timeout=timeout) as resp:
            if resp.status != 200:
                from ..errors import GatewayError

                err = GatewayError(f"profile fetch failed with HTTP {resp.status}", code="profile_unreachable")
                err.http_status = 424  # type: ignore[misc]
                raise err
            profile = await resp.json(content_type=None)
        keys = {k["kid"]: k for k in keys_of_profile(profile) if isinstance(k.get("kid"), str)}
        entry = _Entry(keys, self._now())
        self._cache[url] = entry
        return entry

    def purge(self, profile_url: str) -> None:
        """Forget the cached profile: the next lookup fetches it again (an operator's purge)."""
        self._cache.pop(profile_url, None)

    def cache_age(self, profile_url: str) -> float | None:
        """Seconds since the profile was fetched, or None if not cached (for the debug endpoint)."""
        e = self._cache.get(profile_url)
        return None if e is None else self._now() - e.fetched

    async def resolve(self, profile_url: str, kid: str, *, force_refresh: bool = False) -> dict | None:
        entry = self._cache.get(profile_url)
        now = self._now()
        if entry is None or now - entry.fetched > self._ttl:
            entry = await self._fetch(profile_url)
        elif force_refresh and kid not in entry.keys:
            origin = "{0.scheme}://{0.netloc}".format(urlsplit(profile_url))
            last = self._last_forced.get(origin)
            if last is None or now - last >= self._floor:
                self._last_forced[origin] = now
                entry = await self._fetch(profile_url)
        return entry.keys.get(kid)

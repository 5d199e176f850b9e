"""A per-key cache of fetched values: single flight, a TTL per value, backoff, stale-if-error.

The outbound fetchers (platform profiles, Web Bot Auth key directories) and the agent graph's rendered
pages (``discovery.graph``) keep their copies under one set of rules, implemented here once:

- concurrent lookups of one key share one fetch (single flight); the fetch runs on when every waiter
  is cancelled, and its outcome is retrieved even then;
- a fetch may be started ahead of any lookup (:meth:`FlightCache.prefetch`: nobody waits for it);
  :meth:`FlightCache.close` cancels the fetches on their way (at shutdown);
- a fetched value is kept for the TTL (seconds) its fetch returns, in an LRU of ``size`` keys;
- a failed fetch (a :class:`~ucp_gateway.errors.GatewayError`) is remembered, in an LRU as large as
  the cache, as class and message only (an exception would keep its traceback); until ``backoff(n)``
  seconds after the n-th failure in a row, a lookup raises the same class, "(retrying later)", and
  fetches nothing; a success forgets the failures;
- a failure of a class in ``stale_on`` (the backoff's among them) serves the cached copy up to
  ``stale_if_error`` seconds past its expiry; a failed refresh never evicts a good copy.

Times are seconds from ``now`` (UTC seconds for the fetchers, monotonic for the pages). Keys are any
hashable values. The fetch is ``async (key, previous value or None) -> (value, ttl)``; the previous
value serves conditional requests (a 304 hands it back with a new TTL).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .errors import GatewayError

__all__ = ["FlightCache", "put_lru"]

V = TypeVar("V")


def put_lru(entries: OrderedDict[Any, Any], key: Hashable, value: Any, size: int) -> None:
    """Store ``value`` as the newest of ``entries``, dropping the oldest beyond ``size``."""
    entries[key] = value
    entries.move_to_end(key)
    while len(entries) > size:
        entries.popitem(last=False)


@dataclass(slots=True)
class Entry(Generic[V]):
    value: V
    expires_at: float  # UTC seconds


@dataclass(slots=True)
class Failure:
    count: int  # failures in a row
    retry_at: float  # UTC seconds
    error_type: type[GatewayError]  # the class and message only: an exception would keep its traceback
    message: str


class FlightCache(Generic[V]):
    """The cache of the module docstring. ``entries`` and ``failures`` are LRUs by key."""

    def __init__(
        self,
        fetch: Callable[[Any, V | None], Awaitable[tuple[V, float]]],
        *,
        now: Callable[[], float],
        size: int,
        stale_if_error: float,
        backoff: Callable[[int], float],
        stale_on: tuple[type[GatewayError], ...] = (GatewayError,),
    ):
        self._fetch = fetch
        self._now = now
        self._size = size
        self._stale_if_error = stale_if_error
        self._backoff = backoff
        self._stale_on = stale_on
        self.entries: OrderedDict[Any, Entry[V]] = OrderedDict()
        self.failures: OrderedDict[Any, Failure] = OrderedDict()
        self._inflight: dict[Any, asyncio.Future[V]] = {}

    async def get(self, key: Hashable) -> V:
        """The value of ``key``: the cached copy while fresh, else fetched (or joined in flight).
        Raises: the fetch's GatewayError (or, in the backoff, its class again) when no copy serves."""
        now = self._now()
        entry = self.entries.get(key)
        if entry is not None and now < entry.expires_at:
            self.entries.move_to_end(key)
            return entry.value
        failure = self.failures.get(key)
        try:
            if failure is not None and now < failure.retry_at:
                raise failure.error_type(f"{failure.message} (retrying later)")
            return await self.refresh(key)
        except self._stale_on:
            if entry is not None and now < entry.expires_at + self._stale_if_error:
                return entry.value
            raise

    async def refresh(self, key: Hashable) -> V:
        """Fetch ``key`` now, past its TTL and its backoff (joining a fetch in flight).
        Raises: the fetch's GatewayError; the cached copy stays."""
        return await asyncio.shield(self._flight(key))

    def prefetch(self, key: Hashable) -> None:
        """Start fetching ``key`` unless its copy is fresh, a fetch is on its way or its backoff
        runs; nobody waits for it (a failure is retrieved and remembered as any other). Synchronous."""
        if key in self._inflight:
            return
        now = self._now()
        entry, failure = self.entries.get(key), self.failures.get(key)
        if (entry is None or now >= entry.expires_at) and (failure is None or now >= failure.retry_at):
            self._flight(key)

    async def close(self) -> None:
        """Cancel the fetches on their way and wait for them (at shutdown: what they use is closing)."""
        flights = list(self._inflight.values())
        for fut in flights:
            fut.cancel()
        await asyncio.gather(*flights, return_exceptions=True)

    def _flight(self, key: Hashable) -> asyncio.Future[V]:
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self._fetch_and_store(key))
            self._inflight[key] = fut
            fut.add_done_callback(lambda f, k=key: self._done(k, f))
        return fut

    def put(self, key: Hashable, value: V, ttl: float) -> None:
        """Keep ``value`` for ``ttl`` seconds from now (a warm cache for a bench, a fetch's result)."""
        put_lru(self.entries, key, Entry(value, self._now() + ttl), self._size)

    def cached(self, key: Hashable) -> V | None:
        """The cached copy (fresh or stale) without any I/O."""
        entry = self.entries.get(key)
        return entry.value if entry else None

    def purge(self, key: Hashable) -> None:
        """Forget the cached copy and the failures of ``key``: the next lookup fetches it."""
        self.entries.pop(key, None)
        self.failures.pop(key, None)

    def _done(self, key: Hashable, fut: asyncio.Future[V]) -> None:
        if self._inflight.get(key) is fut:
            del self._inflight[key]
        if not fut.cancelled():
            fut.exception()  # mark retrieved even when every waiter went away

    async def _fetch_and_store(self, key: Hashable) -> V:
        previous = self.entries.get(key)
        try:
            value, ttl = await self._fetch(key, previous.value if previous else None)
        except GatewayError as exc:
            count = self.failures[key].count + 1 if key in self.failures else 1
            failure = Failure(count, self._now() + self._backoff(count), type(exc), exc.message)
            put_lru(self.failures, key, failure, self._size)
            raise
        self.failures.pop(key, None)
        self.put(key, value, ttl)
        return value

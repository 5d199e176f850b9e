"""Host -> company resolution cached per process (the per-request path of tenancy).

:class:`HostCache` answers a request's Host from memory and revalidates what is due in batches
(:func:`.tenancy.host_versions`); :mod:`.tenancy` holds the lookups it caches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

import asyncpg

from .logs import get_logger
from .tenancy import Company, host_versions, normalize_host, resolve_host_versioned

__all__ = ["HostCache"]

_log = get_logger("ucp_gateway.tenancy")  # the tenancy log: where its host events always were


class HostCache:
    """Host -> company lookups cached for ``ttl`` seconds (monotonic clock), revalidated in batches.

    A short TTL keeps the per-request cost of tenancy at a dict lookup while changes to a company
    (new hostname, new signature policy) take effect within about ``ttl`` seconds on every replica.
    An entry keeps the company's profile version (migration 0092, renewed by every change to the
    company's row and hostnames). Once its ``ttl`` is up, the entry is still answered for at most
    one more ``ttl`` while ONE background task revalidates every such Host in one read
    (:func:`host_versions`, up to ``_BATCH`` a query): an entry whose Host still names the same
    company at the same version is renewed, any other is dropped (its next request resolves it).
    So a platform with many company hosts pays one query per ``ttl`` for all of them rather than
    a full-path request and a query per Host, and no answer is older than two ``ttl``. Concurrent
    misses for one Host share one database lookup (with ``ttl`` > 0). At most ``max_entries``
    Hosts are kept; the oldest lookups go first.

    :meth:`known` (what a public document cached per Host asks) queues a revalidation only once the
    entry is ``known_ttl`` old (the document's own cache ``ttl``, at least ``ttl``): a document is no
    fresher than its render, so its Host need not be read more often, and a platform with many
    hosts asked for their documents pays a revalidation per Host per ``known_ttl``, not per ``ttl``.
    A revalidation waits ``GATHER`` of ``ttl`` before its read, so the Hosts falling due one by one
    under load are read together, a few reads per ``ttl`` rather than one back-to-back read of the
    few that fell due during the last (ten thousand Hosts asked for at random were a hundred small
    reads a second that way). A revalidation read hands its results on in chunks of ``_CHUNK``
    entries with a turn of the event loop between them, so a thousand Hosts renewed do not stall
    the requests in flight.

    An entry is a list ``[expires, company, version]`` renewed in place: a revalidation allocates
    nothing that outlives it, so ten thousand Hosts renewed every ``ttl`` do not feed the garbage
    collector's oldest generation (new long-lived objects are what trigger its full collections,
    each one a stall of every request in flight that grows with the number of companies).
    """

    MISS = object()  #: what :meth:`cached` returns when the Host needs a lookup
    _BATCH = 1000
    _CHUNK = 200
    #: the part of ``ttl`` a revalidation waits, once a Host falls due, for others to fall due too
    GATHER = 0.125

    def __init__(self, ttl: float = 2.0, max_entries: int = 100_000, known_grace: float = 60.0, known_ttl: float = 0.0):
        self.ttl = ttl
        self.max_entries = max_entries
        self.known_grace = max(known_grace, ttl)
        self.known_ttl = min(max(known_ttl, ttl), self.known_grace)
        self._entries: dict[str, list[Any]] = {}  # Host -> [expires, company | None, version | None]
        self._inflight: dict[str, asyncio.Future[Company | None]] = {}
        self._stale: set[str] = set()
        self._reading: frozenset[str] = frozenset()  # the Hosts of the revalidation read in flight
        self._pool: asyncpg.Pool | None = None
        self._revalidating: asyncio.Task[None] | None = None
        #: called after each revalidation read with ``[(host, company id, version, read at)]`` of the
        #: company Hosts it renewed (monotonic seconds): caches keyed by Host renew what those cover
        self.renewed: list[Callable[[list[tuple[str, UUID, UUID | None, float]]], None]] = []

    def cached(self, host: str | None) -> Company | object | None:
        """The company (None = platform node) while the entry for ``host`` is fresh, or stale and
        being revalidated (class docstring), else :attr:`MISS`. Synchronous: the per-request hit
        costs no coroutine."""
        key = host or ""
        hit = self._entries.get(key)
        if hit is not None:
            now = time.monotonic()
            if hit[0] > now:
                return hit[1]
            if hit[0] + self.ttl > now and self._pool is not None:
                self._stale.add(key)
                if self._revalidating is None:
                    self._revalidating = asyncio.get_running_loop().create_task(self._revalidate())
                return hit[1]
        return self.MISS

    def known(self, host: str | None) -> bool:
        """Whether ``host`` was resolved less than ``known_grace`` seconds ago (its revalidation
        started when it is stale): enough for a public document whose own cache entry is kept per
        Host and revalidated by version (``/.well-known/ucp``'s fast path), never for a decision
        that reads the company (signature policy, settings: :meth:`cached`). Synchronous."""
        key = host or ""
        hit = self._entries.get(key)
        if hit is None:
            return False
        read = hit[0] - self.ttl  # when the entry was read (monotonic seconds)
        now = time.monotonic()
        if read + self.known_ttl > now:
            return True
        if read + self.known_grace > now and self._pool is not None:
            self._stale.add(key)
            if self._revalidating is None:
                self._revalidating = asyncio.get_running_loop().create_task(self._revalidate())
            return True
        return False

    def revalidating(self, host: str | None) -> bool:
        """Whether a revalidation read covers the entry for ``host`` (queued by :meth:`known` or
        :meth:`cached`, which the fast path asks first, or in the read in flight) and it has a
        company, so the read tells :attr:`renewed` about it. Synchronous."""
        key = host or ""
        if key not in self._stale and key not in self._reading:
            return False
        hit = self._entries.get(key)
        return hit is not None and hit[1] is not None

    async def resolve(self, pool: asyncpg.Pool, host: str | None) -> Company | None:
        """Like :func:`resolve_host`, through the cache (keyed by the Host as received, so a hit
        costs no normalising; every spelling resolves through :func:`normalize_host`).
        Raises what :func:`resolve_host` raises (database errors) to every request sharing the lookup."""
        key = host or ""
        hit = self._entries.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        if self.ttl <= 0:  # no caching asked for: every request reads the database itself
            return (await resolve_host_versioned(pool, normalize_host(key)))[0]
        self._pool = pool
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._lookup(pool, key))
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._done(key, t))
        return await asyncio.shield(task)  # a cancelled request does not cancel the others' lookup

    def _put(self, key: str, entry: list[Any]) -> None:
        entries = self._entries
        entries.pop(key, None)  # re-inserted last: the oldest entries are the first in the dict
        while len(entries) >= self.max_entries:  # bounded memory; a burst of junk Host headers
            del entries[next(iter(entries))]  # evicts the oldest lookups, not every company's
        entries[key] = entry

    async def _lookup(self, pool: asyncpg.Pool, key: str) -> Company | None:
        start = time.monotonic()  # the answer's age counts from before the query
        company, version = await resolve_host_versioned(pool, normalize_host(key))
        self._put(key, [start + self.ttl, company, version])
        return company

    async def _revalidate(self) -> None:
        try:
            while self._stale and self._pool is not None:
                await asyncio.sleep(self.ttl * self.GATHER)  # more Hosts fall due meanwhile (class docstring)
                if not self._stale or self._pool is None:
                    break
                keys = [self._stale.pop() for _ in range(min(len(self._stale), self._BATCH))]
                self._reading = frozenset(keys)
                start = time.monotonic()
                names = [(key, normalize_host(key)) for key in keys]
                now = await host_versions(self._pool, sorted({name for _, name in names}))
                for at in range(0, len(names), self._CHUNK):
                    if at:
                        await asyncio.sleep(0)  # a turn for the requests in flight (class docstring)
                    self._renew(names[at : at + self._CHUNK], now, start)
                self._reading = frozenset()
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
            # the stale entries lapse after their grace; the full path then answers (an outage: 503)
            _log.warning("host_cache_revalidation_failed", error=exc.__class__.__name__)
            self._stale.clear()
        finally:
            self._reading = frozenset()
            self._revalidating = None

    def _renew(self, names: list[tuple[str, str]], now: dict[str, tuple[Any, Any]], start: float) -> None:
        """Renew (in place, class docstring) or drop the entries of ``[(Host, normalised name)]`` by
        what the read started at ``start`` found, ``now``; tell :attr:`renewed` what was renewed."""
        renewed = []
        for key, name in names:
            hit = self._entries.get(key)
            if hit is None or hit[0] > start:
                continue  # gone, or resolved again meanwhile
            company = hit[1]
            if now.get(name, (None, None)) == (company.id if company else None, hit[2]):
                hit[0] = start + self.ttl
                self._put(key, hit)
                if company is not None:
                    renewed.append((key, company.id, hit[2], start))
            else:
                self._entries.pop(key, None)  # changed: the next request resolves it
        for hook in self.renewed:
            hook(renewed)

    def _done(self, key: str, task: asyncio.Future[Company | None]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have gone

    def clear(self) -> None:
        self._entries.clear()
        self._stale.clear()

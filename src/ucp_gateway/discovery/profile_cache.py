"""The rendered-profile cache of ``/.well-known/ucp``: sized by memory, revalidated by version.

One entry per key (the Host as received, or ``(protocol version, Host)`` for the documents of the
older served versions: every document of every company in one cache and one memory budget): the
body, its strong ETag, the prepared 200 and 304 headers, and the company and version (migration
0092: a random stamp that changes with the company's row, hostnames, sub-agents and keys) it was
rendered at. An entry is fresh for ``ttl`` seconds; after that it is served stale while it waits for
the next revalidation read, which asks for the versions of up to ``BATCH`` companies at once and
renews each entry as it is when its company's version is unchanged, or drops it (the next request
renders) when it changed. So a company's profile costs a render when it changed, and every entry
asked for costs a thousandth of a small read per ``ttl``: ten thousand companies' profiles, each
asked less often than every ``ttl``, are ten reads per ``ttl``, not one per request. A renewal
changes the entry in place: it allocates nothing that outlives it, so ten thousand entries renewed
every ``ttl`` do not feed the garbage collector's oldest generation (whose full collections, each a
stall of every request in flight, its new long-lived objects trigger).

The cache holds at most ``max_bytes`` of entries (body and headers, an estimate), evicting the
entries renewed longest ago first: an entry is re-inserted when it is renewed, and it is renewed
only when it is asked for, so the order is close to least recently used without any work on a hit.
The fast path answers a stale entry too, for at most ``grace`` seconds past its ``ttl`` (the
profile's ``max-age``: what any client may keep it for anyway), while it is revalidated
(:meth:`RenderedProfiles.stale`): the profiles of many companies, each asked less often than every
``ttl``, then stay on the fast path.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from uuid import UUID

import structlog
from aiohttp import web
from multidict import CIMultiDict, istr

from .caching import etag_matches, make_etag

__all__ = ["ENTRY_OVERHEAD", "Entry", "RenderedProfiles", "hosted", "hosting_headers"]

JSON = "application/json"
#: Bytes an entry costs beside its body and ETag (the object, the two header maps, the key, the
#: cache's link): about 1.4 KB measured with tracemalloc.
ENTRY_OVERHEAD = 1400
_IF_NONE_MATCH = istr("If-None-Match")
_log = structlog.get_logger("ucp_gateway.discovery")

#: ``render() -> (body, company id or None, version or None)``: None for what no version covers
#: (the platform node's document, which lists the directory): rendered again every ``ttl``.
Render = Callable[[], Awaitable[tuple[bytes, UUID | None, UUID | None]]]
#: ``versions([company id]) -> {company id: its current version}`` (a company left out: gone).
Versions = Callable[[list[UUID]], Awaitable[Mapping[UUID, UUID]]]


def hosting_headers(etag: str, max_age: int, content_type: str | None = None) -> CIMultiDict[str]:
    """``Cache-Control: public, max-age=N``, ``ETag`` and (for a 200) ``Content-Type``, in that order."""
    headers = CIMultiDict((("Cache-Control", f"public, max-age={max_age}"), ("ETag", etag)))
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers


_CACHE_CONTROL, _ETAG, _CONTENT_TYPE = istr("Cache-Control"), istr("ETag"), istr("Content-Type")
#: prepared response headers: a tuple of name/value pairs, which the garbage collector does not
#: track (a CIMultiDict per entry made ten thousand companies' entries slow every full collection)
Pairs = tuple[tuple[istr, str], ...]


def _pairs(etag: str, max_age: int, content_type: str | None = None) -> Pairs:
    """:func:`hosting_headers` as a tuple of pairs, in the same order."""
    head = ((_CACHE_CONTROL, f"public, max-age={max_age}"), (_ETAG, etag))
    return head if content_type is None else (*head, (_CONTENT_TYPE, content_type))


def hosted(request: web.Request, body: bytes, etag: str, content_type: str, max_age: int) -> web.Response:
    """200 with ``body``, or 304 when ``If-None-Match`` matches ``etag`` (RFC 9110 §13.1.2)."""
    # several If-None-Match lines are one comma-separated list (RFC 9110 §5.3)
    if etag_matches(",".join(request.headers.getall(_IF_NONE_MATCH, ())), etag):
        return web.Response(status=304, headers=hosting_headers(etag, max_age))
    return web.Response(body=body, headers=hosting_headers(etag, max_age, content_type))


class Entry:
    """One rendered profile: its bytes, strong ETag, freshness deadline (monotonic seconds), the
    company and version it was rendered at, and the 200 and 304 response headers for the
    ``max_age`` they were built with (rebuilt if the setting changes), so an answer costs one
    header copy and no formatting."""

    __slots__ = ("body", "company", "etag", "expires", "headers", "max_age", "not_modified", "size", "version")

    def __init__(
        self, expires: float, body: bytes, etag: str, company: UUID | None = None, version: UUID | None = None
    ):
        self.expires = expires
        self.body = body
        self.etag = etag
        self.company, self.version = company, version
        self.size = len(body) + 2 * len(etag) + ENTRY_OVERHEAD
        self.max_age = -1
        self.headers: Pairs | None = None
        self.not_modified: Pairs | None = None

    def response(self, request: web.Request, max_age: int) -> web.Response:
        """The hosted answer (200 or 304) with ``Cache-Control: public, max-age={max_age}``: what
        ``hosted`` answers for this body (tests/discovery/test_fast_path.py holds them equal)."""
        if self.max_age != max_age or self.headers is None or self.not_modified is None:
            self.headers = _pairs(self.etag, max_age, JSON)
            self.not_modified = _pairs(self.etag, max_age)
            self.max_age = max_age
        headers = request.headers
        # several If-None-Match lines are one comma-separated list (RFC 9110 §5.3)
        if _IF_NONE_MATCH in headers and etag_matches(",".join(headers.getall(_IF_NONE_MATCH)), self.etag):
            return web.Response(status=304, headers=self.not_modified)
        return web.Response(body=self.body, headers=self.headers)


class RenderedProfiles:
    """Rendered profiles by key: fresh for ``ttl`` seconds, then served stale while they are
    revalidated together, ``BATCH`` companies a read (no read per key, no stampede when entries
    expire under load); at most ``max_bytes`` of entries for every key together (module docstring)."""

    BATCH = 1000  #: companies whose versions one revalidation read asks for
    CHUNK = 200  #: entries renewed between two turns of the event loop (no stall of a whole read)
    #: the part of ``ttl`` a revalidation waits before its read, so that the entries falling due one
    #: by one under load are read together (a few reads per ``ttl``, not one per entry or two)
    GATHER = 0.125

    def __init__(
        self,
        ttl: float,
        versions: Versions,
        max_bytes: int = 64 * 1024 * 1024,
        grace: float | None = None,
        covered: Callable[[Hashable], bool] | None = None,
    ):
        self.ttl = ttl
        # covered(key): another read already on its way will renew the key (:meth:`vouch`), so a
        # stale answer does not queue a read of its own
        self._covered = covered
        self.grace = ttl if grace is None else grace  # how long past its ttl the fast path answers it
        self.max_bytes = max_bytes
        self.bytes = 0
        self._versions = versions
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Task[Entry]] = {}
        self._stale: set[Hashable] = set()
        self._revalidating: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def fresh(self, key: Hashable) -> Entry | None:
        """The entry for ``key`` while it is fresh, else None (the hot path: no closure, no task)."""
        hit = self._entries.get(key)
        if hit is not None and time.monotonic() < hit.expires:
            return hit
        return None

    def stale(self, key: Hashable) -> Entry | None:
        """The entry for ``key`` when its time is up by less than ``grace`` seconds and a version
        covers it, queued for the next revalidation read (renewed when the company's version is
        unchanged, dropped when it changed: the next request renders), unless ``covered`` says a
        read on its way covers it; else None. Synchronous, for the fast path: a queued key costs a
        set insertion."""
        hit = self._entries.get(key)
        if hit is None or hit.version is None or time.monotonic() >= hit.expires + self.grace:
            return None
        if self._covered is None or not self._covered(key):
            self._queue(key)
        return hit

    def vouch(self, key: Hashable, company: UUID, version: UUID | None, at: float) -> None:
        """Renew the entry for ``key`` as rendered when ``company`` was read at ``version`` at
        ``at`` (monotonic seconds) by someone else (the host cache's revalidation of the same Host):
        no read of its own. An entry of another company or version is left as it is."""
        hit = self._entries.get(key)
        if hit is not None and hit.version is not None and hit.company == company and hit.version == version:
            if hit.expires < at + self.ttl:
                hit.expires = at + self.ttl
                self._entries.move_to_end(key)  # renewed: the last to go

    def _queue(self, key: Hashable) -> None:
        self._stale.add(key)
        if self._revalidating is None:
            self._revalidating = asyncio.get_running_loop().create_task(self._revalidate())

    async def _revalidate(self) -> None:
        """Every queued key, ``BATCH`` companies a read, each read ``GATHER`` of ``ttl`` after the
        last (what falls due meanwhile is read with it): renewed as rendered when its company's
        version is the one it was rendered at, dropped otherwise. A failed read leaves the queued
        entries to lapse after their grace (the full path then renders, or answers the outage)."""
        entries, stale = self._entries, self._stale
        try:
            while stale:
                await asyncio.sleep(self.ttl * self.GATHER)
                keys, companies = [], set()
                picked = time.monotonic()
                while stale and len(companies) < self.BATCH:
                    key = stale.pop()
                    hit = entries.get(key)
                    # not one renewed while the last read was out (answers meanwhile queued it again)
                    if hit is not None and hit.company is not None and hit.expires <= picked:
                        keys.append(key)
                        companies.add(hit.company)
                if not keys:
                    continue
                started = time.monotonic()  # the renewal is as old as the read
                now = await self._versions(list(companies))
                for at in range(0, len(keys), self.CHUNK):
                    if at:
                        await asyncio.sleep(0)  # a turn for the requests in flight
                    self._renew(keys[at : at + self.CHUNK], now, started)
        except Exception as exc:  # a database error or outage; logged, never raised into a request
            _log.warning("profile_revalidation_failed", error=type(exc).__name__)
            stale.clear()
        finally:
            self._revalidating = None

    def _renew(self, keys: list[Hashable], now: Mapping[UUID, UUID], started: float) -> None:
        """Renew each entry of ``keys`` whose company is still at the version it was rendered at by
        the read started at ``started`` (``now``), in place (module docstring); drop the others."""
        entries = self._entries
        for key in keys:
            hit = entries.get(key)
            if hit is None or hit.expires > started or hit.company is None:
                continue  # gone, or rendered again meanwhile
            if now.get(hit.company) == hit.version:
                hit.expires = started + self.ttl
                entries.move_to_end(key)  # renewed: the last to go
            else:
                del entries[key]
                self.bytes -= hit.size

    async def get(self, key: Hashable, render: Render) -> Entry:
        """The entry for ``key``: fresh, stale (its revalidation queued, or its render started when
        no version covers it), or rendered now (one render shared by every request waiting for it).
        Raises what ``render`` raises to those."""
        hit = self._entries.get(key)
        if hit is not None:
            if time.monotonic() >= hit.expires:
                if hit.version is not None and hit.company is not None:
                    self._queue(key)
                elif key not in self._inflight:
                    self._start(key, render)
            return hit
        task = self._inflight.get(key) or self._start(key, render)
        return await asyncio.shield(task)

    def _start(self, key: Hashable, render: Render) -> asyncio.Task[Entry]:
        async def run() -> Entry:
            started = time.monotonic()  # the rendering is as old as the reads it starts with
            body, company, ver = await render()
            return self._store(key, Entry(started + self.ttl, body, make_etag(body), company, ver))

        task = asyncio.ensure_future(run())
        self._inflight[key] = task
        task.add_done_callback(lambda t: self._done(key, t))
        return task

    def _store(self, key: Hashable, entry: Entry) -> Entry:
        entries = self._entries
        old = entries.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        entries[key] = entry  # last: renewed most recently
        self.bytes += entry.size
        while self.bytes > self.max_bytes and len(entries) > 1:
            _, gone = entries.popitem(last=False)
            self.bytes -= gone.size
        return entry

    def _done(self, key: Hashable, task: asyncio.Task[Entry]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled() and task.exception() is not None:
            _log.warning("profile_render_failed", host=key, error=type(task.exception()).__name__)

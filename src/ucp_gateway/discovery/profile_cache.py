"""The rendered-profile cache of ``/.well-known/ucp``: sized by memory, revalidated by version.

One entry per key (the Host as received; a key may name more, e.g. a UCP version beside the Host,
so several documents of one company fit): the body, its strong ETag, the prepared 200 and 304
headers, and the company and version (migration 0092: a random stamp that changes with the
company's row, hostnames, sub-agents and keys) it was rendered at. An entry is fresh for ``ttl``
seconds; after that it is served stale while ONE background task per key reads the company's
version (one small query) and renews the entry as it is when the version is unchanged, or renders
again when it changed. So a company's profile costs a render when it changed and a version read per
``ttl`` while it is asked for, not three transactions and a render.

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
from collections.abc import Awaitable, Callable, Hashable
from uuid import UUID

import structlog
from aiohttp import web
from multidict import CIMultiDict, istr

from .caching import etag_matches, make_etag

__all__ = ["ENTRY_OVERHEAD", "Entry", "RenderedProfiles", "hosting_headers"]

JSON = "application/json"
#: Bytes an entry costs beside its body (the object, the two header maps, the key): an estimate.
ENTRY_OVERHEAD = 1024
_IF_NONE_MATCH = istr("If-None-Match")
_log = structlog.get_logger("ucp_gateway.discovery")

#: ``render() -> (body, company id or None, version or None)``: None for what no version covers
#: (the platform node's document, which lists the directory): rendered again every ``ttl``.
Render = Callable[[], Awaitable[tuple[bytes, UUID | None, UUID | None]]]
#: ``version(company_id) -> the company's current version or None``.
Version = Callable[[UUID], Awaitable[UUID | None]]


def hosting_headers(etag: str, max_age: int, content_type: str | None = None) -> CIMultiDict[str]:
    """``Cache-Control: public, max-age=N``, ``ETag`` and (for a 200) ``Content-Type``, in that order."""
    headers = CIMultiDict((("Cache-Control", f"public, max-age={max_age}"), ("ETag", etag)))
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers


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
        self.headers: CIMultiDict[str] | None = None
        self.not_modified: CIMultiDict[str] | None = None

    def renewed(self, expires: float) -> Entry:
        """The same rendering, fresh until ``expires`` (its prepared headers kept)."""
        out = Entry(expires, self.body, self.etag, self.company, self.version)
        out.max_age, out.headers, out.not_modified = self.max_age, self.headers, self.not_modified
        return out

    def response(self, request: web.Request, max_age: int) -> web.Response:
        """The hosted answer (200 or 304) with ``Cache-Control: public, max-age={max_age}``: what
        ``web._hosted`` answers for this body (tests/discovery/test_fast_path.py holds them equal)."""
        if self.max_age != max_age or self.headers is None or self.not_modified is None:
            self.headers = hosting_headers(self.etag, max_age, JSON)
            self.not_modified = hosting_headers(self.etag, max_age)
            self.max_age = max_age
        headers = request.headers
        # several If-None-Match lines are one comma-separated list (RFC 9110 §5.3)
        if _IF_NONE_MATCH in headers and etag_matches(",".join(headers.getall(_IF_NONE_MATCH)), self.etag):
            return web.Response(status=304, headers=self.not_modified)
        return web.Response(body=self.body, headers=self.headers)


class RenderedProfiles:
    """Rendered profiles by key: fresh for ``ttl`` seconds, then served stale while ONE background
    task per key revalidates (no stampede of reads when an entry expires under load); at most
    ``max_bytes`` of entries (module docstring)."""

    def __init__(self, ttl: float, max_bytes: int = 64 * 1024 * 1024, grace: float | None = None):
        self.ttl = ttl
        self.grace = ttl if grace is None else grace  # how long past its ttl the fast path answers it
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Task[Entry]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def fresh(self, key: Hashable) -> Entry | None:
        """The entry for ``key`` while it is fresh, else None (the hot path: no closure, no task)."""
        hit = self._entries.get(key)
        if hit is not None and time.monotonic() < hit.expires:
            return hit
        return None

    def stale(self, key: Hashable, version: Version) -> Entry | None:
        """The entry for ``key`` when its time is up by less than ``grace`` seconds and a version
        covers it, its revalidation started (renewed when the version is unchanged, dropped when it
        changed: the next request renders); else None. Synchronous, for the fast path."""
        hit = self._entries.get(key)
        if hit is None or hit.company is None or hit.version is None or time.monotonic() >= hit.expires + self.grace:
            return None
        if key not in self._inflight:
            self._track(key, self._check(key, version, hit))
        return hit

    async def _check(self, key: Hashable, version: Version, stale: Entry) -> Entry:
        assert stale.company is not None
        if await version(stale.company) == stale.version:
            return self._store(key, stale.renewed(time.monotonic() + self.ttl))
        if self._entries.get(key) is stale:
            del self._entries[key]
            self.bytes -= stale.size
        return stale

    async def get(self, key: Hashable, render: Render, version: Version) -> Entry:
        """The entry for ``key``: fresh, stale (its revalidation started), or rendered now (one
        render shared by every request waiting for it). Raises what ``render`` raises to those."""
        hit = self._entries.get(key)
        if hit is not None:
            if time.monotonic() >= hit.expires and key not in self._inflight:
                self._start(key, render, version, hit)
            return hit
        task = self._inflight.get(key) or self._start(key, render, version, None)
        return await asyncio.shield(task)

    def _start(self, key: Hashable, render: Render, version: Version, stale: Entry | None) -> asyncio.Task[Entry]:
        async def run() -> Entry:
            if stale is not None and stale.company is not None and stale.version is not None:
                if await version(stale.company) == stale.version:  # unchanged: the same bytes, renewed
                    return self._store(key, stale.renewed(time.monotonic() + self.ttl))
            started = time.monotonic()  # the rendering is as old as the reads it starts with
            body, company, ver = await render()
            return self._store(key, Entry(started + self.ttl, body, make_etag(body), company, ver))

        return self._track(key, run())

    def _track(self, key: Hashable, work) -> asyncio.Task[Entry]:
        task = asyncio.ensure_future(work)
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

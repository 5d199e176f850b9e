"""The agent graph: the platform's companies in keyset pages (``GET /ucp/agent-graph?cursor=...``
and the first page inside the platform node's ``/.well-known/ucp``).

A page is one read of only its own rows (the companies after the cursor by the slug index, then
each one's first hostname), narrowed to what a page shows: slug, display name, the
``settings.platform_listing`` value and the first hostname (no Company objects, no settings
copies). Pages are reused for ``ttl`` seconds per ``(cursor, size)`` and evicted oldest first when
the cache is full. Page size: ``agent_graph_page_size`` (default 1,000: ten pages for ten thousand
companies); the platform node's document embeds a first page of at most ``PROFILE_PAGE`` companies
so that it stays small (its ``next`` cursor leads to the full-size pages).
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import asyncpg
import structlog
from aiohttp import web

from ..appkeys import DATABASE, REQ_COMPANY, SETTINGS
from ..db import platform_tx
from ..errors import GatewayError, NotFound
from ..mediatype import json_response
from ..tenancy import normalize_host, public_origin, resolve_host, valid_host_header
from .builder import decode_cursor, encode_cursor
from .caching import make_etag
from .platform import PlatformNode
from .profile_cache import hosted

__all__ = ["PAGES", "PLATFORM", "PROFILE_PAGE", "DirectoryPages", "agent_graph", "graph_page"]

#: Companies the platform node's ``/.well-known/ucp`` lists in its first page, at most.
PROFILE_PAGE = 100
_log = structlog.get_logger("ucp_gateway.discovery")

# slug, display name, settings.platform_listing (jsonb, None when absent), the first hostname in
# code-point order (as Company.hostnames sorts them); two statements so that each plan is an index
# range scan (``$1 IS NULL OR slug > $1`` may not be, in a generic plan)
_COLUMNS = (
    "SELECT c.slug, c.display_name, c.settings -> 'platform_listing',"
    ' (SELECT min(h.hostname COLLATE "C") FROM company_hosts h WHERE h.company_id = c.id) FROM companies c'
)
_FIRST = _COLUMNS + " ORDER BY c.slug LIMIT $1"
_AFTER = _COLUMNS + " WHERE c.slug > $1 ORDER BY c.slug LIMIT $2"


async def directory_rows(pool: asyncpg.Pool, after: str | None, limit: int) -> list[asyncpg.Record]:
    """At most ``limit`` ``(slug, display_name, platform_listing, first hostname)`` rows of the
    companies with slug > ``after`` (all when None), by slug, in one read."""
    async with platform_tx(pool) as conn:
        return await (conn.fetch(_FIRST, limit) if after is None else conn.fetch(_AFTER, after, limit))


class DirectoryPages:
    """Directory rows by ``(after, limit)``, reused for ``ttl`` seconds (the rendered profiles'
    life); at most ``capacity`` pages, the oldest evicted first (not all of them)."""

    def __init__(self, ttl: float, capacity: int = 1024):
        self.ttl, self.capacity = ttl, capacity
        self._entries: dict[tuple[str | None, int], tuple[float, list[asyncpg.Record]]] = {}

    async def get(self, pool: asyncpg.Pool, after: str | None, limit: int) -> list[asyncpg.Record]:
        key, now = (after, limit), time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and now < hit[0]:
            return hit[1]
        rows = await directory_rows(pool, after, limit)
        entries = self._entries
        entries.pop(key, None)  # re-inserted last: the oldest pages are the first in the dict
        while len(entries) >= self.capacity:
            del entries[next(iter(entries))]
        entries[key] = (now + self.ttl, rows)
        return rows


PAGES = web.AppKey("ucpgw.directory_pages", DirectoryPages)
PLATFORM = web.AppKey("ucpgw.platform_node", PlatformNode)  # where the graph is served, its origin


def _listed(row: asyncpg.Record) -> bool:
    """``settings.platform_listing``: absent or null is listed, a boolean says, anything else is
    read as unlisted (listing is the disclosure: fail closed) and logged."""
    value = row[2]
    if value is None or value is True:
        return True
    if value is not False:
        _log.error("company_settings_invalid", slug=row[0], read="platform_listing", effect="read as False")
    return False


async def graph_page(app: web.Application, after: str | None, size: int | None = None) -> dict[str, Any]:
    """``{"companies": [{slug, name, profile?}], "next": url | None, "pages": url}``: the page of
    ``size`` companies (``agent_graph_page_size`` by default) after the cursor ``after``. Every URL
    in it from the configuration (``app[PLATFORM]``: the platform origin, the companies' public
    port), none from the request."""
    settings, platform = app[SETTINGS], app[PLATFORM]
    size = settings.agent_graph_page_size if size is None else size
    rows = await app[PAGES].get(app[DATABASE].pool, after, size + 1)
    port = platform.link_port  # a company hostname has no port: the public one
    scheme = settings.public_scheme
    head = scheme + "://"
    tail = public_origin(scheme, "h", port)[len(head) + 1 :] + "/.well-known/ucp"  # ":port" or "", then the path
    companies = []
    for row in rows[:size]:
        if not _listed(row):
            continue
        item: dict[str, Any] = {"slug": row[0], "name": row[1]}
        name = row[3]
        if name is not None:  # stored as public_origin publishes it; an IPv6 literal bracketed
            item["profile"] = head + (f"[{name}]" if ":" in name else name) + tail
        companies.append(item)
    pages = f"{platform.origin}/ucp/agent-graph"
    next_url = pages + "?cursor=" + quote(encode_cursor(rows[size - 1][0])) if len(rows) > size else None
    return {"companies": companies, "next": next_url, "pages": pages}


async def agent_graph(request: web.Request) -> web.Response:
    """``GET /ucp/agent-graph?cursor=...``: one page of the platform's companies, on a platform host
    bound to no company only (else 404 ``not_found``)."""
    if not valid_host_header(request.host):
        return json_response({"code": "invalid_request", "content": "invalid Host header"}, status=400)
    company = request.get(REQ_COMPANY, ...)
    if company is ...:  # no tenancy middleware in front of us
        company = await resolve_host(request.app[DATABASE].pool, normalize_host(request.host))
    try:
        if company is not None:
            raise NotFound("the agent graph is served on the platform's hosts")
        request.app[PLATFORM].check(request.host)
        cursor = request.query.get("cursor")
        after = decode_cursor(cursor) if cursor else None
    except GatewayError as exc:
        return json_response(exc.to_body(), status=exc.http_status)
    page = await graph_page(request.app, after)
    body = json.dumps(page, separators=(",", ":")).encode()
    return hosted(request, body, make_etag(body), "application/json", request.app[SETTINGS].profile_max_age)

"""The agent graph: the platform's companies in keyset pages (``GET /ucp/agent-graph?cursor=...``
and the first page inside the platform node's ``/.well-known/ucp``).

A page is one statement that reads only its own rows (a range of the directory's slug index,
migration 0140: each company's slug, name, listing and first hostname, kept there by triggers) and
returns the page's companies already as JSON text (no Company objects, no Records per company, no
settings copies): the gateway adds the ``next`` and ``pages`` links and keeps the page as bytes and
ETag in the one single-flight cache (``ucp_gateway.flightcache``), reused for ``ttl`` seconds per
``(cursor, size)`` and evicted least recently asked first when the cache is full. Page size:
``agent_graph_page_size`` (default 1,000: ten pages for ten thousand companies); the platform
node's document embeds a first page of at most ``PROFILE_PAGE`` companies so that it stays small
(its ``next`` cursor leads to the full-size pages).
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
from ..errors import GatewayError, NotFound
from ..flightcache import FlightCache
from ..mediatype import json_response
from ..tenancy import normalize_host, public_origin, resolve_host, valid_host_header
from .builder import decode_cursor, encode_cursor
from .caching import make_etag
from .platform import PlatformNode
from .profile_cache import hosted

__all__ = [
    "PAGES",
    "PLATFORM",
    "PROFILE_PAGE",
    "DirectoryPages",
    "agent_graph",
    "graph_page",
    "page_json",
    "rendered_page",
]

#: Companies the platform node's ``/.well-known/ucp`` lists in its first page, at most.
PROFILE_PAGE = 100
_log = structlog.get_logger("ucp_gateway.discovery")

# One statement renders a page: the companies after the cursor in the directory (migration 0140:
# one row per company with its slug, name, platform_listing and first hostname in code-point order,
# as Company.hostnames sorts them, kept by triggers; the page is a range of its slug index, which
# holds every column read), one more than the page, to know whether a next page exists, and the
# page's ``companies`` array as compact JSON text built by PostgreSQL (keys in the order slug,
# name, profile; strings escaped by to_json, but the slug, which migration 0001's CHECK keeps to
# [a-z0-9-]), the listed ones only; with it the number of rows read, the page's last slug (the next
# cursor) and the slugs whose settings.platform_listing is neither absent, null nor a boolean (read
# as unlisted, logged). No Record per company, no dict, no json.dumps: a page of 1,000 is one round
# trip and a string. The directory is read under its open policy (as companies and company_hosts:
# no tenant context involved), outside a transaction. Two statements so that each plan is an index
# range scan (``$4 IS NULL OR slug > $4`` may not be, in a generic plan).
_PAGE = """WITH page AS (
  SELECT slug, name, listing, host FROM company_directory {where} ORDER BY slug LIMIT $1::int + 1
), shown AS (SELECT * FROM page ORDER BY slug LIMIT $1::int)
SELECT coalesce(string_agg('{{"slug":"' || slug || '","name":' || to_json(name)::text
    || coalesce(',"profile":' || to_json($2::text
      || CASE WHEN strpos(host, ':') > 0 THEN '[' || host || ']' ELSE host END || $3::text)::text, '')
    || '}}', ',' ORDER BY slug) FILTER (WHERE listing IS NULL OR listing IN ('null', 'true')), ''),
  (SELECT count(*) FROM page)::int, max(slug),
  coalesce(array_agg(slug ORDER BY slug) FILTER (WHERE listing NOT IN ('null', 'true', 'false')), '{{}}')
FROM shown"""
_FIRST = _PAGE.format(where="")
_AFTER = _PAGE.format(where="WHERE slug > $4")


async def page_json(
    pool: asyncpg.Pool, after: str | None, size: int, head: str, tail: str
) -> tuple[str, bool, str | None]:
    """``(companies, more, last)`` of the page of at most ``size`` companies with slug > ``after``
    (from the first when None), in one read: ``companies`` the JSON array's items as text
    (``{"slug", "name", "profile"?}``, listed companies only; profile ``head + first hostname +
    tail``, an IPv6 literal bracketed), ``more`` whether companies follow, ``last`` the page's
    last slug. A ``platform_listing`` that is no boolean is read as unlisted and logged."""
    if after is None:
        row = await pool.fetchrow(_FIRST, size, head, tail)
    else:
        row = await pool.fetchrow(_AFTER, size, head, tail, after)
    for slug in row[3]:  # listing is the disclosure: fail closed
        _log.error("company_settings_invalid", slug=slug, read="platform_listing", effect="read as False")
    return row[0], row[1] > size, row[2]


#: a rendered page: its JSON body and strong ETag
Page = tuple[bytes, str]


class DirectoryPages:
    """Rendered agent-graph pages by ``(pool, after, size, head, tail, pages)`` in the one
    single-flight cache (:class:`ucp_gateway.flightcache.FlightCache`: concurrent requests for one
    page share one read, which runs on when they are cancelled), reused for ``ttl`` seconds (the
    rendered profiles' life) from the start of their read; at most ``capacity`` pages, the least
    recently asked evicted first. A page is bytes and its ETag: a repeated walk renders nothing.
    Asked with ``ahead``, the page after it is read at once in the background (one page ahead,
    never more): a walker following ``next`` finds it read, or on its way, while the page it has
    travels and is parsed. A failed read is logged (``agent_graph_page_failed``) and raised to its
    waiters; nothing of it is kept (the next request reads again)."""

    def __init__(self, ttl: float, capacity: int = 1024):
        self.ttl = ttl
        # value: the page and the next page's cursor (None on the last page)
        self._flights: FlightCache[tuple[Page, str | None]] = FlightCache(
            self._read, now=time.monotonic, size=capacity, stale_if_error=0.0, backoff=lambda n: 0.0
        )

    async def get(
        self, pool: asyncpg.Pool, after: str | None, size: int, head: str, tail: str, pages: str, ahead: bool = False
    ) -> Page:
        """The page of ``size`` companies after ``after`` (:func:`page_json`), its ``next`` link
        ``pages?cursor=...`` and ``pages`` itself: ``{"companies": [...], "next": url | None,
        "pages": url}`` as compact JSON bytes, and its ETag. Raises what the read raises."""
        page, following = await self._flights.get((pool, after, size, head, tail, pages))
        if ahead and following is not None:
            self._flights.prefetch((pool, following, size, head, tail, pages))
        return page

    async def _read(self, key: tuple[Any, ...], _previous: object) -> tuple[tuple[Page, str | None], float]:
        pool, after, size, head, tail, pages = key
        started = time.monotonic()  # the page is as old as its read
        try:
            companies, more, last = await page_json(pool, after, size, head, tail)
        except Exception as exc:  # a page read ahead has no waiter to see it
            _log.warning("agent_graph_page_failed", error=type(exc).__name__)
            raise
        following = last if more else None
        next_url = json.dumps(pages + "?cursor=" + quote(encode_cursor(following))) if following else "null"
        body = f'{{"companies":[{companies}],"next":{next_url},"pages":{json.dumps(pages)}}}'.encode()
        return ((body, make_etag(body)), following), started + self.ttl - time.monotonic()

    async def close(self) -> None:
        """Cancel the reads on their way (at cleanup: the pool is closing)."""
        await self._flights.close()


PAGES = web.AppKey("ucpgw.directory_pages", DirectoryPages)
PLATFORM = web.AppKey("ucpgw.platform_node", PlatformNode)  # where the graph is served, its origin


async def rendered_page(app: web.Application, after: str | None, size: int | None = None, ahead: bool = False) -> Page:
    """The page of ``size`` companies (``agent_graph_page_size`` by default) after the cursor
    ``after``, rendered (:meth:`DirectoryPages.get`; ``ahead``: the next page read meanwhile).
    Every URL in it from the configuration (``app[PLATFORM]``: the platform origin, the companies'
    public port), none from the request."""
    settings, platform = app[SETTINGS], app[PLATFORM]
    size = settings.agent_graph_page_size if size is None else size
    scheme = settings.public_scheme
    head = scheme + "://"  # a company hostname has no port: the public one
    tail = public_origin(scheme, "h", platform.link_port)[len(head) + 1 :] + "/.well-known/ucp"  # ":port" or ""
    pages = f"{platform.origin}/ucp/agent-graph"
    return await app[PAGES].get(app[DATABASE].pool, after, size, head, tail, pages, ahead)


async def graph_page(app: web.Application, after: str | None, size: int | None = None) -> dict[str, Any]:
    """``{"companies": [{slug, name, profile?}], "next": url | None, "pages": url}``: the page of
    :func:`rendered_page` as a document (what the platform node's profile embeds)."""
    return json.loads((await rendered_page(app, after, size))[0])


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
    body, etag = await rendered_page(request.app, after, ahead=True)  # a walker asks for the next one next
    return hosted(request, body, etag, "application/json", request.app[SETTINGS].profile_max_age)

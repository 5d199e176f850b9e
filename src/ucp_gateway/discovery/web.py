"""aiohttp wiring for discovery: ``GET /.well-known/ucp``, the agent-graph pages, vendor documents.

Hosting rules (UCP overview "Profile Requirements -> Hosting"): never a redirect;
``Cache-Control: public, max-age=N`` with N >= 60; a strong ETag and ``If-None-Match`` -> 304. A
rendered profile is kept per Host for ``profile_render_ttl`` seconds with its ETag and response
headers, so the hot path is a dict lookup and one Response. Behind ``create_app`` a fresh profile is
answered from the foundation layer (``app[PUBLIC_FAST_PATHS]``, :func:`public_fast_path`) without the
trust and signature middlewares, for requests those middlewares would not act on; when served by
``serve.run_server`` the same answer is given by the front path, before aiohttp's router
(``ucp_gateway.middleware.front_handler``).

Wiring: ``setup`` sets ``app[KEY_RESOLVER]`` (httpsig) to the profile fetcher and takes the company's
keys from ``ucp_gateway.keys.published_jwks``. Other parts plug in with one line before start:
    app[KEYS_PROVIDER] = <async (pool, company_id) -> [jwk]>                  # default published_jwks
    app[SUBAGENT_PROVIDER] = <async (company, subagent) -> SubagentSummary>   # verb registry
    app[PAYMENT_HANDLERS_PROVIDER] = <async (company) -> {name: [handler]}>   # commerce
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit
from uuid import UUID

import asyncpg
import structlog
from aiohttp import web
from multidict import CIMultiDict, istr

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, SETTINGS
from ..config import Settings
from ..errors import ConfigError, GatewayError
from ..httpsig.web import KEY_RESOLVER
from ..keys import published_jwks
from ..mediatype import json_response
from ..middleware import PUBLIC_FAST_PATHS, PublicPath
from ..tenancy import (
    Company,
    list_companies,
    list_subagents,
    normalize_host,
    public_origin,
    resolve_host,
    valid_host_header,
)
from .builder import (
    CompanyLink,
    SubagentSummary,
    VendorNamespace,
    agent_graph_page,
    authority_binding_ok,
    build_company_profile,
    build_platform_profile,
    decode_cursor,
    default_payment_handlers,
    encode_cursor,
)
from .caching import etag_matches, make_etag
from .fetcher import ProfileFetcher
from .trust import TRUST_CACHE, TrustCache, trust_exempt, trust_middleware
from .vendor_docs import schema_document, spec_document

__all__ = [
    "KEYS_PROVIDER",
    "PAYMENT_HANDLERS_PROVIDER",
    "PROFILE_FETCHER",
    "SUBAGENT_PROVIDER",
    "VENDOR",
    "company_profile_document",
    "public_fast_path",
    "setup",
]

KeysProvider = Callable[[asyncpg.Pool, UUID], Awaitable[Sequence[Mapping[str, Any]]]]
SubagentProvider = Callable[[Company, str], Awaitable[SubagentSummary]]
PaymentHandlersProvider = Callable[[Company], Awaitable[Mapping[str, Sequence[Mapping[str, Any]]]]]

PROFILE_FETCHER = web.AppKey("ucpgw.profile_fetcher", ProfileFetcher)
KEYS_PROVIDER = web.AppKey("ucpgw.keys_provider", KeysProvider)  # type: ignore[arg-type]
SUBAGENT_PROVIDER = web.AppKey("ucpgw.subagent_provider", SubagentProvider)  # type: ignore[arg-type]
PAYMENT_HANDLERS_PROVIDER = web.AppKey("ucpgw.payment_handlers_provider", PaymentHandlersProvider)  # type: ignore[arg-type]
VENDOR = web.AppKey("ucpgw.vendor", VendorNamespace)
JSON = "application/json"
_log = structlog.get_logger("ucp_gateway.discovery")


async def empty_subagent(company: Company, subagent: str) -> SubagentSummary:
    """Default sub-agent summary until the verb registry is wired: no verbs, default manifest URL."""
    return SubagentSummary()


def _origin(settings: Settings, host: str) -> str:
    """The public origin for a request's Host (the configured ``public_port`` wins over the Host's)."""
    return public_origin(settings.public_scheme, host, settings.public_port)


def _hosting_headers(etag: str, max_age: int, content_type: str | None = None) -> CIMultiDict[str]:
    """``Cache-Control: public, max-age=N``, ``ETag`` and (for a 200) ``Content-Type``, in that order."""
    headers = CIMultiDict((("Cache-Control", f"public, max-age={max_age}"), ("ETag", etag)))
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers


def _hosted(request: web.Request, body: bytes, etag: str, content_type: str, max_age: int) -> web.Response:
    """200 with ``body``, or 304 when ``If-None-Match`` matches ``etag`` (RFC 9110 §13.1.2)."""
    # several If-None-Match lines are one comma-separated list (RFC 9110 §5.3)
    if etag_matches(",".join(request.headers.getall(_IF_NONE_MATCH, ())), etag):
        return web.Response(status=304, headers=_hosting_headers(etag, max_age))
    return web.Response(body=body, headers=_hosting_headers(etag, max_age, content_type))


async def company_profile_document(app: web.Application, company: Company, origin: str) -> dict[str, Any]:
    """The company's business profile (also what negotiation intersects against)."""
    pool = app[DATABASE].pool
    enabled = [n for n, on in (await list_subagents(pool, company.id)).items() if on]
    provider = app[SUBAGENT_PROVIDER]
    summaries = {n: await provider(company, n) for n in enabled}
    return build_company_profile(
        origin=origin,
        vendor=app[VENDOR],
        subagents=summaries,
        keys=await app[KEYS_PROVIDER](pool, company.id),
        payment_handlers=await app[PAYMENT_HANDLERS_PROVIDER](company),
    )


class _Pages:
    """Directory pages (``list_companies`` answers) by ``(after, limit)``, reused for ``ttl`` seconds
    (the rendered profiles' life): the platform document is rendered per Host spelling, so a client
    naming a new Host on every request made every request a directory read. Bounded."""

    def __init__(self, ttl: float, capacity: int = 64):
        self.ttl, self.capacity = ttl, capacity
        self._entries: dict[tuple[str | None, int], tuple[float, list[Company]]] = {}

    async def get(self, pool, after: str | None, limit: int) -> list[Company]:
        key, now = (after, limit), time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and now < hit[0]:
            return hit[1]
        companies = await list_companies(pool, after_slug=after, limit=limit)
        if len(self._entries) >= self.capacity:
            self._entries.clear()
        self._entries[key] = (now + self.ttl, companies)
        return companies


_PAGES = web.AppKey("ucpgw.directory_pages", _Pages)


async def _graph_page(app: web.Application, host: str, after: str | None) -> dict[str, Any]:
    settings = app[SETTINGS]
    size = settings.agent_graph_page_size
    companies = await app[_PAGES].get(app[DATABASE].pool, after, size + 1)
    # a company hostname has no port: take the public one (configured, else the one this request came in on)
    port = settings.public_port
    if port is None:
        own = host.rpartition(":")[2] if not host.endswith("]") else ""
        port = int(own) if own.isdigit() else None
    scheme = settings.public_scheme
    links = [
        CompanyLink(
            c.slug,
            c.display_name,
            public_origin(scheme, c.hostnames[0], port) + "/.well-known/ucp" if c.hostnames else None,
        )
        for c in companies[:size]
    ]
    pages = _origin(settings, host) + "/ucp/agent-graph"
    next_url = pages + "?cursor=" + quote(encode_cursor(companies[size - 1].slug)) if len(companies) > size else None
    return agent_graph_page(links, next_url=next_url, page_url=pages)


# header names as istr: a case-insensitive lookup with a plain str folds the name on every request
_IF_NONE_MATCH = istr("If-None-Match")
_SIGNATURE, _SIGNATURE_INPUT, _ACCEPT_SIGNATURE = istr("Signature"), istr("Signature-Input"), istr("Accept-Signature")


class _Entry:
    """One rendered profile: its bytes, strong ETag, freshness deadline (monotonic seconds) and the
    200 and 304 response headers for the ``max_age`` they were built with (rebuilt if the setting
    changes), so an answer costs one header copy and no formatting."""

    __slots__ = ("body", "etag", "expires", "headers", "max_age", "not_modified")

    def __init__(self, expires: float, body: bytes, etag: str):
        self.expires = expires
        self.body = body
        self.etag = etag
        self.max_age = -1
        self.headers: CIMultiDict[str] | None = None
        self.not_modified: CIMultiDict[str] | None = None

    def response(self, request: web.Request, max_age: int) -> web.Response:
        """The hosted answer (200 or 304) with ``Cache-Control: public, max-age={max_age}``: what
        :func:`_hosted` answers for this body (tests/discovery/test_fast_path.py holds them equal)."""
        if self.max_age != max_age or self.headers is None or self.not_modified is None:
            self.headers = _hosting_headers(self.etag, max_age, JSON)
            self.not_modified = _hosting_headers(self.etag, max_age)
            self.max_age = max_age
        headers = request.headers
        # several If-None-Match lines are one comma-separated list (RFC 9110 §5.3)
        if _IF_NONE_MATCH in headers and etag_matches(",".join(headers.getall(_IF_NONE_MATCH)), self.etag):
            return web.Response(status=304, headers=self.not_modified)
        return web.Response(body=self.body, headers=self.headers)


class _Rendered:
    """Rendered profiles per Host: fresh for ``ttl`` seconds, then served stale while ONE background
    task re-renders (no stampede of DB reads when an entry expires under load). Bounded LRU."""

    def __init__(self, ttl: float, capacity: int = 1024):
        self.ttl = ttl
        self.capacity = capacity
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[_Entry]] = {}

    def fresh(self, key: str) -> _Entry | None:
        """The entry for ``key`` while it is fresh, else None (the hot path: no closure, no task)."""
        hit = self._entries.get(key)
        if hit is not None and time.monotonic() < hit.expires:
            return hit
        return None

    async def get(self, key: str, render: Callable[[], Awaitable[bytes]]) -> _Entry:
        hit = self._entries.get(key)
        if hit is not None:
            if time.monotonic() >= hit.expires and key not in self._inflight:
                self._start(key, render)
            return hit
        task = self._inflight.get(key) or self._start(key, render)
        return await asyncio.shield(task)

    def _start(self, key: str, render: Callable[[], Awaitable[bytes]]) -> asyncio.Task[_Entry]:
        async def run() -> _Entry:
            body = await render()
            entry = _Entry(time.monotonic() + self.ttl, body, make_etag(body))
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            return entry

        task = asyncio.ensure_future(run())
        self._inflight[key] = task
        task.add_done_callback(lambda t: self._done(key, t))
        return task

    def _done(self, key: str, task: asyncio.Task[_Entry]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled() and task.exception() is not None:
            _log.warning("profile_render_failed", host=key, error=type(task.exception()).__name__)


_RENDERED = web.AppKey("ucpgw.rendered_profiles", _Rendered)


async def _render_document(app: web.Application, host: str, company: Company | None) -> bytes:
    if company is None:
        doc = build_platform_profile(vendor=app[VENDOR], first_page=await _graph_page(app, host, None))
    else:
        doc = await company_profile_document(app, company, _origin(app[SETTINGS], host))
    return json.dumps(doc, separators=(",", ":")).encode()


async def _render(app: web.Application, request: web.Request) -> _Entry:
    # keyed by the Host as received, so a hit needs no normalising; rendered with the lower-cased
    # host (case-insensitive, RFC 9110 §4.2.3), so every spelling gets the same bytes
    key = request.host
    host = key.lower()

    async def render() -> bytes:
        company = request.get(REQ_COMPANY, ...)
        if company is ...:  # no tenancy middleware in front of us
            company = await resolve_host(app[DATABASE].pool, normalize_host(host))
        return await _render_document(app, host, company)

    return await app[_RENDERED].get(key, render)


def _bad_host() -> web.Response:
    return json_response({"code": "invalid_request", "content": "invalid Host header"}, status=400)


async def well_known_ucp(request: web.Request) -> web.Response:
    """``GET /.well-known/ucp``: company profile on a company host, platform node otherwise.
    A Host that is not a plain host[:port] is refused (400): it would be echoed into URLs."""
    app = request.app
    hit = app[_RENDERED].fresh(request.host)  # only a valid Host is ever rendered and cached
    if hit is None:
        if not valid_host_header(request.host):
            return _bad_host()
        hit = await _render(app, request)
    return hit.response(request, app[SETTINGS].profile_max_age)


def public_fast_path(rendered: _Rendered, settings: Settings) -> Callable[[web.Request, str], web.Response | None]:
    """The answer of ``app[PUBLIC_FAST_PATHS]["/.well-known/ucp"]``: ``(request, host) -> response | None``.

    The foundation layer asks it only for requests the router sent to :func:`well_known_ucp` (GET or
    HEAD of this path; 404/405 take the full path), after request id and tenancy and before the trust
    and signature middlewares; the front path asks it for the same requests before routing (it reads
    neither ``request.match_info`` nor ``request.app``). It answers the fresh cached profile, or returns
    None for the full path. Fail closed: it answers only when the full path would give the same bytes:

    - no request body (the signature middleware reads one: 413 too large, 408 too slow);
    - no ``Signature``, ``Signature-Input`` or ``Accept-Signature`` header (signature material goes
      the full path even where the path is exempt, so a policy change cannot be skipped here);
    - the path is exempt from trust (``UCP-Agent`` is never acted on there; a constant) and, in the
      current settings, from signature verification (``httpsig_exempt_prefixes``, re-read whenever
      the setting is a new object);
    - the rendered profile for this Host is fresh (a miss or an invalid Host takes the full path).

    The answer is built by the same code as :func:`well_known_ucp`'s (:meth:`_Entry.response`), so
    status, headers and body are identical; the foundation layer adds ``Request-Id`` and ``Server``
    to both alike.
    """
    path = "/.well-known/ucp"
    if not trust_exempt(path):  # pragma: no cover - trust's exemptions are constants
        raise ConfigError("the /.well-known/ucp fast path needs the path exempt from trust")
    entries = rendered._entries
    monotonic = time.monotonic
    seen: list[Any] = [None, False]  # (httpsig_exempt_prefixes last read, whether it exempts the path)

    def fast_path(request: web.Request, host: str) -> web.Response | None:
        if request.body_exists:
            return None
        headers = request.headers
        if _SIGNATURE in headers or _SIGNATURE_INPUT in headers or _ACCEPT_SIGNATURE in headers:
            return None
        prefixes = settings.httpsig_exempt_prefixes
        if prefixes is not seen[0] or type(prefixes) is not tuple:  # a list may change in place
            seen[0], seen[1] = prefixes, path.startswith(tuple(prefixes))
        if not seen[1]:
            return None
        hit = entries.get(host)  # _Rendered.fresh, inlined
        if hit is None or monotonic() >= hit.expires:
            return None
        return hit.response(request, settings.profile_max_age)

    return fast_path


async def agent_graph(request: web.Request) -> web.Response:
    """``GET /ucp/agent-graph?cursor=...``: one page of the platform's companies."""
    if not valid_host_header(request.host):
        return _bad_host()
    cursor = request.query.get("cursor")
    try:
        after = decode_cursor(cursor) if cursor else None
    except GatewayError as exc:
        return json_response(exc.to_body(), status=exc.http_status)
    page = await _graph_page(request.app, request.host.lower(), after)
    body = json.dumps(page, separators=(",", ":")).encode()
    return _hosted(request, body, make_etag(body), JSON, request.app[SETTINGS].profile_max_age)


def _document_handler(kind: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        vendor = request.app[VENDOR]
        body = spec_document(vendor, name) if kind == "spec" else schema_document(vendor, name)
        if body is None:
            return json_response({"code": "not_found", "content": "unknown document"}, status=404)
        ctype = "text/markdown" if kind == "spec" else "application/schema+json"
        return _hosted(request, body, make_etag(body), ctype, request.app[SETTINGS].profile_max_age)

    return handler


async def _close_fetcher(app: web.Application) -> None:
    await app[PROFILE_FETCHER].close()


def setup(app: web.Application) -> None:
    """Register discovery routes, the profile fetcher (``app[PROFILE_FETCHER]``) and default providers.

    Raises: ConfigError in production when the vendor prefix and base URL break authority binding.
    """
    settings = app[SETTINGS]
    vendor = VendorNamespace(settings.vendor_prefix, settings.vendor_base_url.rstrip("/"))
    if not settings.dev_mode and not authority_binding_ok(vendor.prefix, vendor.base_url):
        raise ConfigError(
            f"vendor_prefix {vendor.prefix!r} is not bound to the host of vendor_base_url {vendor.base_url!r}"
        )
    app[VENDOR] = vendor
    fetcher = ProfileFetcher(settings, clock=app[CLOCK] if CLOCK in app else None)
    app[PROFILE_FETCHER] = fetcher
    app[KEY_RESOLVER] = fetcher  # the signature middleware resolves caller keys through the fetcher
    rendered = app[_RENDERED] = _Rendered(settings.profile_render_ttl)
    app[_PAGES] = _Pages(settings.profile_render_ttl)
    if KEYS_PROVIDER not in app:
        app[KEYS_PROVIDER] = published_jwks  # pending + active + rotating (ucp_gateway.keys)
    if SUBAGENT_PROVIDER not in app:
        app[SUBAGENT_PROVIDER] = empty_subagent
    if PAYMENT_HANDLERS_PROVIDER not in app:

        async def demo_handlers(company: Company) -> Mapping[str, Sequence[Mapping[str, Any]]]:
            return default_payment_handlers(vendor)

        app[PAYMENT_HANDLERS_PROVIDER] = demo_handlers
    base = urlsplit(vendor.base_url).path.rstrip("/")
    app.router.add_get("/.well-known/ucp", well_known_ucp)
    if PUBLIC_FAST_PATHS in app:  # behind create_app's foundation middleware
        app[PUBLIC_FAST_PATHS]["/.well-known/ucp"] = PublicPath(well_known_ucp, public_fast_path(rendered, settings))
    app.router.add_get("/ucp/agent-graph", agent_graph)
    app.router.add_get(base + "/specification/{name}", _document_handler("spec"))
    app.router.add_get(base + "/schemas/{name}.json", _document_handler("schema"))
    # public on every host, like /.well-known/ucp: agents read them before they can sign anything
    public = ("/ucp/agent-graph", base + "/specification/", base + "/schemas/")
    exempt = tuple(settings.httpsig_exempt_prefixes)
    settings.httpsig_exempt_prefixes = exempt + tuple(p for p in public if p not in exempt)
    app[TRUST_CACHE] = TrustCache(settings.partner_cache_ttl)
    app.middlewares.append(trust_middleware)  # list this component before httpsig in COMPONENTS
    app.on_cleanup.append(_close_fetcher)

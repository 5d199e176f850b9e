"""aiohttp wiring for discovery: ``GET /.well-known/ucp``, the agent-graph pages, vendor documents.

Hosting rules (UCP overview "Profile Requirements -> Hosting"): never a redirect;
``Cache-Control: public, max-age=N`` with N >= 60; a strong ETag and ``If-None-Match`` -> 304. A
rendered profile is kept per Host for ``profile_render_ttl`` seconds, so the hot path is a dict
lookup and a byte copy.

Wiring: ``setup`` sets ``app[KEY_RESOLVER]`` (httpsig) to the profile fetcher and takes the company's
keys from ``ucp_gateway.keys.published_jwks``. Other parts plug in with one line before start:
    app[KEYS_PROVIDER] = <async (pool, company_id) -> [jwk]>                  # default published_jwks
    app[SUBAGENT_PROVIDER] = <async (company, subagent) -> SubagentSummary>   # verb registry
    app[PAYMENT_HANDLERS_PROVIDER] = <async (company) -> {name: [handler]}>   # commerce
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit
from uuid import UUID

import asyncpg
import structlog
from aiohttp import web

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, SETTINGS
from ..config import Settings
from ..errors import ConfigError, GatewayError
from ..httpsig.web import KEY_RESOLVER
from ..keys import published_jwks
from ..tenancy import Company, list_companies, list_subagents, normalize_host, public_origin, resolve_host
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
from .trust import TRUST_CACHE, TrustCache, trust_middleware
from .vendor_docs import schema_document, spec_document

__all__ = [
    "KEYS_PROVIDER",
    "PAYMENT_HANDLERS_PROVIDER",
    "PROFILE_FETCHER",
    "SUBAGENT_PROVIDER",
    "VENDOR",
    "company_profile_document",
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


def _hosted(request: web.Request, body: bytes, etag: str, content_type: str, max_age: int) -> web.Response:
    headers = {"Cache-Control": f"public, max-age={max_age}", "ETag": etag}
    if etag_matches(request.headers.get("If-None-Match"), etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, headers=headers, content_type=content_type)


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


async def _graph_page(app: web.Application, host: str, after: str | None) -> dict[str, Any]:
    settings = app[SETTINGS]
    size = settings.agent_graph_page_size
    companies = await list_companies(app[DATABASE].pool, after_slug=after, limit=size + 1)
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


class _Rendered:
    """Rendered profiles per Host: fresh for ``ttl`` seconds, then served stale while ONE background
    task re-renders (no stampede of DB reads when an entry expires under load). Bounded LRU."""

    def __init__(self, ttl: float, capacity: int = 1024):
        self.ttl = ttl
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[float, bytes, str]] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[tuple[bytes, str]]] = {}

    def fresh(self, key: str) -> tuple[bytes, str] | None:
        """The entry for ``key`` while it is fresh, else None (the hot path: no closure, no task)."""
        hit = self._entries.get(key)
        if hit is not None and time.monotonic() < hit[0]:
            return hit[1], hit[2]
        return None

    async def get(self, key: str, render: Callable[[], Awaitable[bytes]]) -> tuple[bytes, str]:
        hit = self._entries.get(key)
        if hit is not None:
            if time.monotonic() >= hit[0] and key not in self._inflight:
                self._start(key, render)
            return hit[1], hit[2]
        task = self._inflight.get(key) or self._start(key, render)
        return await asyncio.shield(task)

    def _start(self, key: str, render: Callable[[], Awaitable[bytes]]) -> asyncio.Task[tuple[bytes, str]]:
        async def run() -> tuple[bytes, str]:
            body = await render()
            etag = make_etag(body)
            self._entries[key] = (time.monotonic() + self.ttl, body, etag)
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            return body, etag

        task = asyncio.ensure_future(run())
        self._inflight[key] = task
        task.add_done_callback(lambda t: self._done(key, t))
        return task

    def _done(self, key: str, task: asyncio.Task[tuple[bytes, str]]) -> None:
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


async def _render(app: web.Application, request: web.Request) -> tuple[bytes, str]:
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


# Host as it may appear in our documents: reg-name or IPv4, or a bracketed IPv6, with an optional port.
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$")


def _valid_host(host: str) -> bool:
    """A plain host[:port] with a port in 1-65535 (it is echoed into the profile's URLs)."""
    if not _HOST.match(host):
        return False
    port = host.rsplit(":", 1)[1] if ":" in host and not host.endswith("]") else None
    return port is None or 0 < int(port) <= 65535


def _bad_host() -> web.Response:
    return web.json_response({"code": "invalid_request", "content": "invalid Host header"}, status=400)


async def well_known_ucp(request: web.Request) -> web.Response:
    """``GET /.well-known/ucp``: company profile on a company host, platform node otherwise.
    A Host that is not a plain host[:port] is refused (400): it would be echoed into URLs."""
    app = request.app
    hit = app[_RENDERED].fresh(request.host)  # only a valid Host is ever rendered and cached
    if hit is None:
        if not _valid_host(request.host):
            return _bad_host()
        hit = await _render(app, request)
    return _hosted(request, hit[0], hit[1], JSON, app[SETTINGS].profile_max_age)


async def agent_graph(request: web.Request) -> web.Response:
    """``GET /ucp/agent-graph?cursor=...``: one page of the platform's companies."""
    if not _valid_host(request.host):
        return _bad_host()
    cursor = request.query.get("cursor")
    try:
        after = decode_cursor(cursor) if cursor else None
    except GatewayError as exc:
        return web.json_response(exc.to_body(), status=exc.http_status)
    page = await _graph_page(request.app, request.host.lower(), after)
    body = json.dumps(page, separators=(",", ":")).encode()
    return _hosted(request, body, make_etag(body), JSON, request.app[SETTINGS].profile_max_age)


def _document_handler(kind: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        vendor = request.app[VENDOR]
        body = spec_document(vendor, name) if kind == "spec" else schema_document(vendor, name)
        if body is None:
            return web.json_response({"code": "not_found", "content": "unknown document"}, status=404)
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
    app[_RENDERED] = _Rendered(settings.profile_render_ttl)
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

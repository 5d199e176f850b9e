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

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import asyncpg
import structlog
from aiohttp import web
from multidict import istr

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, SETTINGS
from ..config import Settings
from ..db import platform_scan_tx
from ..errors import ConfigError
from ..httpsig.web import KEY_RESOLVER
from ..keys import published_jwks
from ..keys.lifecycle import PUBLISHED
from ..mediatype import json_response
from ..middleware import HOST_CACHE, PUBLIC_FAST_PATHS, PublicPath
from ..tenancy import (
    Company,
    list_subagents,
    normalize_host,
    public_origin,
    resolve_host,
    valid_host_header,
)
from ..versions import ROOT, SERVED, VERSIONS
from .builder import (
    SubagentSummary,
    VendorNamespace,
    authority_binding_ok,
    build_company_profile,
    build_platform_profile,
    default_payment_handlers,
)
from .caching import make_etag
from .fetcher import ProfileFetcher
from .graph import PAGES, PLATFORM, PROFILE_PAGE, DirectoryPages, agent_graph, graph_page
from .platform import NotThePlatform, platform_node
from .profile_cache import RenderedProfiles, hosted
from .trust import TRUST_CACHE, TrustCache, trust_exempt, trust_middleware
from .vendor_docs import schema_document, spec_document

__all__ = [
    "KEYS_PROVIDER",
    "PAYMENT_HANDLERS_PROVIDER",
    "PROFILE_FETCHER",
    "SUBAGENT_PROVIDER",
    "VENDOR",
    "company_profile_document",
    "company_profile_documents",
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


# the parts of a company's profile in ONE statement (one round trip, no BEGIN/COMMIT): the version
# they are at (migration 0092), its enabled sub-agents and its published keys
# (ucp_gateway.keys.published_jwks: pending, active, rotating; active first). The tenant context is
# set by set_config(..., true) in the outer row, which lives as long as the statement's implicit
# transaction; the LATERAL subquery (kept apart by OFFSET 0) is read after it, so RLS sees the
# context; the explicit company_id predicates keep another tenant's rows out whatever it held (the
# pattern of keys.repository's active-key read)
_PARTS = (
    "SELECT p.version, p.subagents, p.keys FROM (SELECT set_config('app.company_id', $1, true) AS cid) AS ctx"
    " CROSS JOIN LATERAL (SELECT"
    " (SELECT version FROM profile_versions WHERE company_id = ctx.cid::uuid) AS version,"
    " ARRAY(SELECT name FROM subagents WHERE enabled AND company_id = ctx.cid::uuid ORDER BY name) AS subagents,"
    " (SELECT coalesce(json_agg(public_jwk ORDER BY (state = 'active') DESC, created_at DESC), '[]')"
    " FROM company_keys WHERE state = ANY($2::text[]) AND company_id = ctx.cid::uuid) AS keys OFFSET 0) AS p"
)
_PUBLISHED = [s.value for s in PUBLISHED]


async def _profile_document(
    app: web.Application, company: Company, origin: str, versions: Sequence[str] = (ROOT,)
) -> tuple[dict[str, dict[str, Any]], Any]:
    """The company's business profile at each of ``versions`` (protocol versions,
    ``ucp_gateway.versions``: ``{version: document}``, from one read of its parts) and the version
    stamp (migration 0092) its parts were read at. With the default keys provider the parts are one
    statement; another provider is asked apart, and the stamp is None (no stamp covers that
    provider's keys: rendered again every ttl)."""
    pool = app[DATABASE].pool
    keys_provider = app[KEYS_PROVIDER]
    if keys_provider is published_jwks:
        row = await pool.fetchrow(_PARTS, str(company.id), _PUBLISHED)
        enabled, keys, version = list(row["subagents"]), row["keys"], row["version"]
    else:
        version = None
        enabled = [n for n, on in (await list_subagents(pool, company.id)).items() if on]
        keys = await keys_provider(pool, company.id)
    provider = app[SUBAGENT_PROVIDER]
    summaries = {n: await provider(company, n) for n in enabled}
    handlers = await app[PAYMENT_HANDLERS_PROVIDER](company)
    docs = {
        v: build_company_profile(
            origin=origin, vendor=app[VENDOR], subagents=summaries, keys=keys, payment_handlers=handlers, version=v
        )
        for v in versions
    }
    return docs, version


async def _versions(pool: asyncpg.Pool, company_ids: list[UUID]) -> dict[UUID, UUID]:
    """The profile versions (migration 0092) of many companies in one read, under the scan scope
    that opens the version stamps only (migration 0093): ``{company id: version}``."""
    async with platform_scan_tx(pool, "host_directory") as conn:
        rows = await conn.fetch(_VERSIONS, company_ids)
    return {r[0]: r[1] for r in rows}


_VERSIONS = "SELECT company_id, version FROM profile_versions WHERE company_id = ANY($1::uuid[])"


async def company_profile_documents(
    app: web.Application, company: Company, origin: str, versions: Sequence[str] = SERVED
) -> dict[str, dict[str, Any]]:
    """The company's business profile per served version (what negotiation intersects against):
    ``{version: document}``, from one read of its sub-agents, keys and payment handlers."""
    docs, _ = await _profile_document(app, company, origin, versions)
    return docs


async def company_profile_document(
    app: web.Application, company: Company, origin: str, version: str = ROOT
) -> dict[str, Any]:
    """The company's business profile at ``version`` (the root by default)."""
    return (await company_profile_documents(app, company, origin, (version,)))[version]


# header names as istr: a case-insensitive lookup with a plain str folds the name on every request
_SIGNATURE, _SIGNATURE_INPUT, _ACCEPT_SIGNATURE = istr("Signature"), istr("Signature-Input"), istr("Accept-Signature")


# every served version's rendered profiles in one cache and one memory budget: the root's keyed by
# the Host as received (the hot path's lookup), an older version's by (version, Host)
_RENDERED = web.AppKey("ucpgw.rendered_profiles", RenderedProfiles)


def _key(protocol: str, host: str) -> Any:
    return host if protocol == ROOT else (protocol, host)


async def _render_document(
    app: web.Application, host: str, company: Company | None, protocol: str = ROOT
) -> tuple[bytes, Any, Any]:
    """``(body, company id, version)`` of the ``protocol`` document for ``host`` (None, None for the
    platform node: its URLs from the configured origin, never ``host``). Raises NotThePlatform for
    a Host of no company that is not a platform host."""
    if company is None:
        platform = app[PLATFORM]
        platform.check(host)
        page = await graph_page(app, None, min(PROFILE_PAGE, app[SETTINGS].agent_graph_page_size))
        doc = build_platform_profile(vendor=app[VENDOR], first_page=page, version=protocol, origin=platform.origin)
        cid = version = None
    else:
        docs, version = await _profile_document(app, company, _origin(app[SETTINGS], host), (protocol,))
        doc, cid = docs[protocol], company.id
    return json.dumps(doc, separators=(",", ":")).encode(), cid, version


async def _render(app: web.Application, request: web.Request, protocol: str = ROOT):
    # keyed by the Host as received, so a hit needs no normalising; rendered with the lower-cased
    # host (case-insensitive, RFC 9110 §4.2.3), so every spelling gets the same bytes
    key = request.host
    host = key.lower()

    company = request.get(REQ_COMPANY, ...)
    if company is None and not app[PLATFORM].serves(host):  # never rendered, so never cached
        return _not_the_platform()

    async def render() -> tuple[bytes, Any, Any]:
        known = company
        if known is ...:  # no tenancy middleware in front of us
            known = await resolve_host(app[DATABASE].pool, normalize_host(host))
        return await _render_document(app, host, known, protocol)

    try:
        return await app[_RENDERED].get(_key(protocol, key), render)
    except NotThePlatform:  # resolved in render() without a tenancy middleware
        return _not_the_platform()


def _not_the_platform() -> web.Response:
    exc = NotThePlatform()
    return json_response(exc.to_body(), status=exc.http_status)


def _bad_host() -> web.Response:
    return json_response({"code": "invalid_request", "content": "invalid Host header"}, status=400)


async def well_known_ucp(request: web.Request) -> web.Response:
    """``GET /.well-known/ucp``: company profile on a company host, the platform node on a platform
    host (``discovery.platform``), 404 ``not_found`` on any other. A Host that is not a plain
    host[:port] is refused (400): it would be echoed into URLs."""
    app = request.app
    hit = app[_RENDERED].fresh(request.host)  # only a valid Host is ever rendered and cached
    if hit is None:
        if not valid_host_header(request.host):
            return _bad_host()
        hit = await _render(app, request)
        if isinstance(hit, web.Response):
            return hit
    return hit.response(request, app[SETTINGS].profile_max_age)


def _well_known_leaf(protocol: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``GET /.well-known/ucp/{version}``: the leaf profile of an older served version, with the
    root's hosting rules (no redirect, public max-age, strong ETag, 304)."""

    async def well_known_leaf(request: web.Request) -> web.Response:
        app = request.app
        hit = app[_RENDERED].fresh((protocol, request.host))
        if hit is None:
            if not valid_host_header(request.host):
                return _bad_host()
            hit = await _render(app, request, protocol)
            if isinstance(hit, web.Response):
                return hit
        return hit.response(request, app[SETTINGS].profile_max_age)

    return well_known_leaf


def public_fast_path(
    rendered: RenderedProfiles, settings: Settings, path: str = "/.well-known/ucp", protocol: str = ROOT
) -> Callable[[web.Request, str], web.Response | None]:
    """The answer of ``app[PUBLIC_FAST_PATHS][path]`` (``/.well-known/ucp`` and each leaf):
    ``(request, host) -> response | None``.

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
    - the rendered ``protocol`` profile for this Host is fresh, or stale by less than
      ``profile_max_age`` with a version that covers it (then it is queued for the cache's next
      revalidation read, :meth:`RenderedProfiles.stale`); a miss or an invalid Host takes the full path.

    The answer is built by the same code as :func:`well_known_ucp`'s (:meth:`_Entry.response`), so
    status, headers and body are identical; the foundation layer adds ``Request-Id`` and ``Server``
    to both alike.
    """
    if not trust_exempt(path):  # pragma: no cover - trust's exemptions are constants
        raise ConfigError(f"the {path} fast path needs the path exempt from trust")
    entries = rendered._entries
    monotonic = time.monotonic
    root = protocol == ROOT
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
        key = host if root else (protocol, host)
        hit = entries.get(key)  # RenderedProfiles.fresh, inlined
        if hit is None:
            return None
        if monotonic() >= hit.expires:  # stale: answered while its version is read, if one covers it
            hit = rendered.stale(key)
            if hit is None:
                return None
        return hit.response(request, settings.profile_max_age)

    return fast_path


def _document_handler(kind: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        vendor = request.app[VENDOR]
        body = spec_document(vendor, name) if kind == "spec" else schema_document(vendor, name)
        if body is None:
            return json_response({"code": "not_found", "content": "unknown document"}, status=404)
        ctype = "text/markdown" if kind == "spec" else "application/schema+json"
        return hosted(request, body, make_etag(body), ctype, request.app[SETTINGS].profile_max_age)

    return handler


async def _close_fetcher(app: web.Application) -> None:
    await app[PROFILE_FETCHER].close()
    await app[PAGES].close()


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
    hosts = app[HOST_CACHE] if HOST_CACHE in app else None
    rendered = app[_RENDERED] = RenderedProfiles(
        settings.profile_render_ttl,
        lambda ids: _versions(app[DATABASE].pool, ids),
        settings.profile_cache_bytes,
        grace=settings.profile_max_age,
        # the host cache's revalidation of the Host renews its documents (below): no second read
        covered=(lambda key: hosts.revalidating(key if type(key) is str else key[1])) if hosts else None,
    )
    app[PAGES] = DirectoryPages(settings.profile_render_ttl)
    app[PLATFORM] = platform_node(settings)
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
    if hosts is not None:  # the host cache's revalidation of a Host renews that Host's documents
        leaves = [v for v in SERVED if v != ROOT]

        def renew(hosts: list[tuple[str, UUID, UUID | None, float]]) -> None:
            for host, company, version, at in hosts:
                rendered.vouch(host, company, version, at)
                for protocol in leaves:
                    rendered.vouch((protocol, host), company, version, at)

        hosts.renewed.append(renew)
    if PUBLIC_FAST_PATHS in app:  # behind create_app's foundation middleware
        app[PUBLIC_FAST_PATHS]["/.well-known/ucp"] = PublicPath(well_known_ucp, public_fast_path(rendered, settings))
    for protocol in SERVED:
        if protocol == ROOT:
            continue
        path = VERSIONS[protocol].profile_path
        handler = _well_known_leaf(protocol)
        app.router.add_get(path, handler)
        if PUBLIC_FAST_PATHS in app:
            app[PUBLIC_FAST_PATHS][path] = PublicPath(handler, public_fast_path(rendered, settings, path, protocol))
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

"""Per-request facts for the shopping operations: company, caller, response envelopes, limits.

The ``ucp`` envelopes list what this gateway implements; when discovery's negotiation has put the
intersection on the request (``REQ_NEGOTIATED``), that list is used instead (UCP overview N7).

The platform's order ``webhook_url`` (what complete stores as the outbox target) is kept only when it
passes the outbound URL policy (``discovery.ssrf.check_target``, the profile fetcher's): otherwise
the order is written with no target, a ``webhook_url_refused`` warning names the platform profile and
the reason (never the URL), and the delivery worker refuses it again at its first attempt.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import http_sf
from aiohttp import web

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, REQ_PRINCIPAL, SETTINGS
from ..company_settings import access_levels, commerce, setting
from ..config import Settings
from ..discovery.agent_header import parse_ucp_agent
from ..discovery.errors import CapabilitiesIncompatible, ProfileMalformed, VersionUnsupported
from ..discovery.service import negotiate_request
from ..discovery.ssrf import RefusedUrl, check_target
from ..discovery.trust import REQ_AGENT_ROLE
from ..discovery.web import PROFILE_FETCHER
from ..errors import BadRequest, GatewayError, NotFound, Unauthorized
from ..httpsig.web import effective_mode
from ..levels import DEFAULT_LEVELS, OPEN_LEVELS, OPERATIONS, STRICT_LEVELS, AccessLevel
from ..logs import get_logger
from ..tenancy import Company, public_origin, resolve_host, valid_host_header
from ..versions import to_wire
from .catalog import PickupLocation
from .checkout import ShopInfo
from .discounts import AutomaticDiscount
from .service import UCP_VERSION, CommerceContext

__all__ = [
    "CHECKOUT_CAPABILITIES",
    "PROFILE_CACHE",
    "Negotiation",
    "RateLimited",
    "build_context",
    "caller_of",
    "caller_profile_url",
    "company_of",
    "negotiate",
    "negotiated_capabilities",
    "payment_handlers",
    "require_access",
    "webhooks_for",
]

CHECKOUT_CAPABILITIES = (
    "dev.ucp.shopping.checkout",
    "dev.ucp.shopping.fulfillment",
    "dev.ucp.shopping.discount",
    "dev.ucp.shopping.buyer_consent",
)


class RateLimited(GatewayError):
    code = "rate_limited"
    http_status = 429


def payment_handlers(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """The demo payment handler as advertised in the profile and in every checkout ``ucp`` (neutral
    shape; ``versions.to_wire("payment_handlers")`` gives each version's). The handler's own version
    is ours to set (vendor-controlled), the same at every protocol version."""
    base = settings.vendor_base_url.rstrip("/")
    return {
        f"{settings.vendor_prefix}.mock_payment": [
            {
                "id": "mock_payment_handler",
                "version": UCP_VERSION,
                "spec": f"{base}/specification/mock_payment",
                "schema": f"{base}/schemas/mock_payment.json",
                "config": {"environment": "demo"},
                "available_instruments": [{"type": "card", "constraints": {"brands": ["visa", "mastercard"]}}],
            }
        ]
    }


async def company_of(request: web.Request) -> Company:
    """The tenant of this request (tenancy middleware's, else resolved from Host). Raises NotFound."""
    company = request.get(REQ_COMPANY, ...)
    if company is ...:
        company = await resolve_host(request.app[DATABASE].pool, request.host)
    if company is None:
        raise NotFound("no shop is served on this host")
    return company


@dataclass(frozen=True)
class Negotiation:
    """What discovery negotiated for this request (None fields: not known). ``webhook_url`` is the
    profile's order webhook_url that passed the outbound URL policy, else None. ``version``: the
    protocol version the request is processed under (the platform's; every response says it)."""

    profile_url: str
    checkout_caps: dict[str, list[dict[str, str]]] | None
    order_caps: dict[str, list[dict[str, str]]] | None
    webhook_url: str | None
    version: str = UCP_VERSION


_log = get_logger("ucp_gateway.commerce.context")

PROFILE_CACHE = web.AppKey("ucpgw.commerce_business_profiles", dict)
_PROFILE_TTL = 5.0
#: (company, origin) entries kept; past it the oldest goes (a few seconds old: they expire in five)
PROFILE_CACHE_MAX = 4096


async def _business_profile(app: web.Application, company: Company, origin: str) -> dict[str, dict[str, Any]]:
    """The company's profile per served version (``{version: document}``), cached for a few seconds."""
    from ..discovery.web import company_profile_documents

    try:  # one lookup: ``in`` on the app is a Mapping ABC walk plus a second lookup
        cache = app[PROFILE_CACHE]
    except KeyError:
        cache = None
    if cache is None:
        return await company_profile_documents(app, company, origin)
    key = (company.id, origin)
    hit = cache.get(key)
    if hit and hit[0] > time.monotonic():
        if not isinstance(hit[1], asyncio.Future):
            return hit[1]
        try:
            return await asyncio.shield(hit[1])
        except asyncio.CancelledError:
            if not hit[1].cancelled():  # this request was cancelled, not the build
                raise
            return await company_profile_documents(app, company, origin)
    # single flight: concurrent requests after expiry wait for one build instead of each building it
    fut: asyncio.Future = asyncio.get_running_loop().create_future()
    cache.pop(key, None)  # re-inserted last: the dict's first entries are the oldest (expired first)
    while len(cache) >= PROFILE_CACHE_MAX:  # bounded: evicts the oldest, not every company's
        del cache[next(iter(cache))]
    cache[key] = (time.monotonic() + _PROFILE_TTL, fut)
    try:
        doc = await company_profile_documents(app, company, origin)
    except BaseException as exc:
        if cache.get(key, (0, None))[1] is fut:
            del cache[key]
        if isinstance(exc, asyncio.CancelledError):
            fut.cancel()
        else:
            fut.set_exception(exc)
            fut.exception()  # retrieved: no "never retrieved" warning when nobody waits
        raise
    fut.set_result(doc)
    if cache.get(key, (0, None))[1] is fut:
        cache[key] = (time.monotonic() + _PROFILE_TTL, doc)
    return doc


def _webhook_url(
    capabilities: Mapping[str, Sequence[Mapping[str, Any]]], dev_hosts: frozenset[str], profile_url: str
) -> str | None:
    """The first order ``config.webhook_url`` of a platform profile when it passes
    ``check_target`` (``dev_hosts``: the dev allowlist, empty outside development), else None: a
    refused URL is logged (``webhook_url_refused``: profile, reason) and not used."""
    for entry in capabilities.get("dev.ucp.shopping.order") or ():
        url = ((entry or {}).get("config") or {}).get("webhook_url")
        if isinstance(url, str) and url:
            try:
                return check_target(url, dev_hosts=dev_hosts, what="webhook")
            except RefusedUrl as exc:
                _log.warning("webhook_url_refused", profile=profile_url, reason=str(exc))
                return None
    return None


# pure functions of the Host header and settings, asked twice per request (negotiate, build_context)
# with the values a shop's requests repeat: memoised (bounded; exceptions are never cached)
@functools.lru_cache(maxsize=1024)
def _origin(scheme: str, host: str, port: int | None) -> str:
    # host names are case-insensitive: lower-cased, as /.well-known/ucp writes them (RFC 3986 §6.2.2.1)
    return public_origin(scheme, host.lower(), port)


@functools.lru_cache(maxsize=1024)
def _valid_host(host: str) -> bool:
    return valid_host_header(host)


@functools.lru_cache(maxsize=64)
def _http_hosts(dev_mode: bool, hosts: tuple[str, ...]) -> frozenset[str]:
    return frozenset(h.lower() for h in hosts) if dev_mode else frozenset()


async def negotiate(request: web.Request, company: Company, operation: str, *, agent: Any = None) -> Negotiation | None:
    """Run discovery's negotiation (UCP overview "Negotiation") when discovery is set up on the app.

    ``agent``: an ``AgentHeader`` taken from MCP ``meta["ucp-agent"]`` instead of the header.
    Raises the discovery errors (400 invalid_profile_url, 403, 422, 424; 200 capabilities_incompatible).
    In conformance mode an empty intersection is tolerated (the suite's profile declares only the
    order capability); the response then lists what the gateway implements.
    """
    app = request.app
    if PROFILE_FETCHER not in app:
        return None
    settings: Settings = app[SETTINGS]
    origin = _origin(settings.public_scheme, request.host, settings.public_port)
    hosts = _http_hosts(settings.dev_mode, tuple(settings.dev_profile_hosts))
    header = request.headers.get("UCP-Agent")
    try:
        rn = await negotiate_request(
            header=header,
            fetcher=app[PROFILE_FETCHER],
            pool=app[DATABASE].pool,
            company=company,
            business_profiles=await _business_profile(app, company, origin),
            operation=operation,
            continue_url=origin + "/",
            http_hosts=hosts,
            agent=agent,
            # the trust middleware resolved the role of this UCP-Agent profile (its cache, its TTL)
            role=request.get(REQ_AGENT_ROLE) if agent is None else None,
        )
    except (CapabilitiesIncompatible, ProfileMalformed, VersionUnsupported):
        if not settings.conformance_mode:
            raise
        # conformance mode only: the suite's agent profile is a 2026-01 document declaring just the
        # order capability; serve with our own capability list, and let the webhook worker read the
        # webhook_url from the raw profile at delivery time.
        agent = agent or parse_ucp_agent(header, http_hosts=hosts)
        return Negotiation(agent.profile, None, None, None)
    return _negotiation(rn.agent.profile, rn.negotiated, rn.profile, operation, hosts)


async def negotiated_capabilities(
    request: web.Request, company: Company, *, agent: Any = None
) -> frozenset[str] | None:
    """The capability names the caller's agent profile (``UCP-Agent``, or ``agent`` from MCP meta)
    negotiates with the business, whatever the operation (UCP overview "Negotiation"); empty when
    they share none. None when discovery is not set up on the app. Raises the discovery errors of
    :func:`negotiate` other than ``capabilities_incompatible`` (a bad URL, an unreachable or malformed
    profile, an unsupported version)."""
    app = request.app
    if PROFILE_FETCHER not in app:
        return None
    settings: Settings = app[SETTINGS]
    origin = _origin(settings.public_scheme, request.host, settings.public_port)
    try:
        rn = await negotiate_request(
            header=request.headers.get("UCP-Agent"),
            fetcher=app[PROFILE_FETCHER],
            pool=app[DATABASE].pool,
            company=company,
            business_profiles=await _business_profile(app, company, origin),
            http_hosts=_http_hosts(settings.dev_mode, tuple(settings.dev_profile_hosts)),
            agent=agent,
            role=request.get(REQ_AGENT_ROLE) if agent is None else None,
        )
    except CapabilitiesIncompatible:
        return frozenset()
    return frozenset(rn.negotiated.capabilities)


# The Negotiation derived from one (negotiated, platform profile) pair is the same every time:
# reuse it while discovery hands out the same objects (identity keys; entries hold the objects).
_NEG_MEMO: dict[tuple, tuple[Any, Any, Negotiation]] = {}


def _negotiation(
    profile_url: str, negotiated: Any, profile: Any, operation: str, dev_hosts: frozenset[str] = frozenset()
) -> Negotiation:
    """The Negotiation of one (negotiated, profile) pair; its webhook_url is checked (:func:`_webhook_url`),
    so a refused one is logged once per fetched profile and operation, not per request."""
    key = (id(negotiated), id(profile), profile_url, operation, dev_hosts)
    hit = _NEG_MEMO.get(key)
    if hit is not None and hit[0] is negotiated and hit[1] is profile:
        return hit[2]
    order_caps = negotiated.response_registry("order") if "dev.ucp.shopping.order" in negotiated.capabilities else None
    out = Negotiation(
        profile_url,
        negotiated.response_registry(operation),
        order_caps,
        _webhook_url(profile.capabilities, dev_hosts, profile_url),
        negotiated.version,
    )
    if len(_NEG_MEMO) >= 2048:  # bounded
        _NEG_MEMO.clear()
    _NEG_MEMO[key] = (negotiated, profile, out)
    return out


#: Prefix of the caller identity of a buyer agent whose profile URL is only claimed (an unsigned
#: request, accepted under signature policy ``optional``/``off``).
UNVERIFIED = "unverified:"


def _verified_profile(request: web.Request) -> str | None:
    """The profile URL of the request's verified principal (set by the signature middleware), or None."""
    principal = request.get(REQ_PRINCIPAL)
    for attr in ("profile_url", "agent_profile", "profile"):
        val = getattr(principal, attr, None) if principal is not None else None
        if val is None and isinstance(principal, Mapping):
            val = principal.get(attr)
        if isinstance(val, str) and val:
            return val
    return None


def caller_of(request: web.Request, neg: Negotiation | None = None) -> str:
    """The buyer agent's identity: the verified principal's profile URL; for a caller that only
    claims one (no verified signature), ``"unverified:" + `` the negotiated or ``UCP-Agent``
    profile URL. The identity owns checkouts and orders and scopes idempotency keys and rate
    limits, so an unsigned caller naming a platform's profile never acts as that platform.

    Raises: BadRequest ``invalid_profile_url`` when none is present (UCP overview N1).
    """
    verified = _verified_profile(request)
    if verified is not None:
        return verified
    if neg is not None:
        return UNVERIFIED + neg.profile_url
    header = request.headers.get("UCP-Agent")
    if header:
        try:
            parsed = http_sf.parse(header.encode(), tltype="dictionary")
            prof = parsed.get("profile")
            if prof and isinstance(prof[0], str) and prof[0]:
                return UNVERIFIED + prof[0]
        except Exception:  # noqa: S110 - any parse failure is the same 400 below
            pass
    raise BadRequest('UCP-Agent header with profile="<url>" is required', code="invalid_profile_url")


def caller_profile_url(caller: str) -> str:
    """The profile URL of a caller identity from :func:`caller_of` (verified or claimed)."""
    return caller.removeprefix(UNVERIFIED)


def webhooks_for(caller: str, dev_mode: bool) -> bool:
    """Whether the orders of ``caller`` (a :func:`caller_of` identity) send order webhooks: a
    verified platform's do; an unsigned caller's only in development (the conformance suite), since
    anyone may claim a profile and its platform would get signed events of orders it never placed."""
    return dev_mode or not caller.startswith(UNVERIFIED)


def _capabilities(
    names: Sequence[str], negotiated: Mapping[str, Any] | None, version: str
) -> dict[str, list[dict[str, str]]]:
    if negotiated:
        return {n: list(v) for n, v in negotiated.items()}
    return {n: [{"version": version}] for n in names}


@dataclass(frozen=True, slots=True)
class _Shop:
    """The request-independent part of a CommerceContext (see :func:`_shop_parts`)."""

    shop: ShopInfo
    order_ucp: dict[str, Any]
    handler_ids: frozenset[str]
    pickup: tuple[PickupLocation, ...]


# (base_url, vendor base, vendor prefix, commerce settings, negotiation) -> _Shop. Identity keys: the
# company's commerce settings dict (one object per cached Company row) and the memoised Negotiation
# (see _negotiation); entries keep both objects so an id is never reused while its entry lives.
_SHOP_MEMO: dict[tuple, tuple[Any, Any, _Shop]] = {}


def _shop_parts(base_url: str, settings: Settings, cs: Mapping[str, Any], neg: Negotiation | None) -> _Shop:
    """Response envelopes, payment handler ids and pickup locations of one shop for one negotiation:
    pure in its arguments, so built once and shared (read-only) by the requests that repeat them."""
    key = (base_url, settings.vendor_base_url, settings.vendor_prefix, id(cs), id(neg))
    hit = _SHOP_MEMO.get(key)
    if hit is not None and hit[0] is cs and hit[1] is neg:
        return hit[2]
    handlers = payment_handlers(settings)
    version = neg.version if neg else UCP_VERSION
    shop = ShopInfo(
        base_url=base_url,
        ucp={
            "version": version,
            "status": "success",
            "capabilities": _capabilities(CHECKOUT_CAPABILITIES, neg.checkout_caps if neg else None, version),
            "payment_handlers": to_wire("payment_handlers", handlers, version),
        },
        automatic_discounts=tuple(AutomaticDiscount(**a) for a in cs.get("automatic_discounts") or ()),
    )
    pickups = cs.get("pickup_locations") or ()
    pickup = tuple(PickupLocation(p["id"], p["name"], p.get("address") or {}) for p in pickups)
    out = _Shop(
        shop=shop,
        order_ucp={
            "version": version,
            "status": "success",
            "capabilities": _capabilities(("dev.ucp.shopping.order",), neg.order_caps if neg else None, version),
        },
        handler_ids=frozenset(h["id"] for entries in handlers.values() for h in entries),
        pickup=pickup,
    )
    if len(_SHOP_MEMO) >= 2048:  # bounded
        _SHOP_MEMO.clear()
    _SHOP_MEMO[key] = (cs, neg, out)
    return out


_NO_SETTINGS: dict[str, Any] = {}


def _access_level(request: web.Request) -> str:
    """The level of the request's principal (the signature layer's; anonymous without one)."""
    return getattr(request.get(REQ_PRINCIPAL), "level", AccessLevel.ANONYMOUS)


def require_access(ctx: CommerceContext, operation: str) -> None:
    """Refuse an operation the caller's access level may not run (the company's access table).
    Raises: Unauthorized (401 ``unauthorized``; the foundation adds the ``WWW-Authenticate``)."""
    if not ctx.permits(operation):
        what = OPERATIONS.get(operation, operation)
        raise Unauthorized(f"{what}: needs an identified platform (a signature, an API key or an OAuth token)")


def build_context(request: web.Request, company: Company, caller: str, neg: Negotiation | None) -> CommerceContext:
    """The CommerceContext of one request: company, caller, clock, shop facts and negotiation.

    The shop part (response ``ucp`` envelopes, payment handlers, automatic discounts, pickup
    locations) is shared between requests with the same inputs (:func:`_shop_parts`); callers treat
    it as read-only. Raises: BadRequest (400) for a Host that is not a plain ``host[:port]`` with a
    port in 1-65535, as ``/.well-known/ucp`` refuses it; CompanyMisconfigured (500
    ``company_misconfigured``) when ``settings.commerce`` or one of its currency, limit, discount
    or pickup entries has the wrong type (:func:`ucp_gateway.company_settings.commerce`).
    """
    settings = request.app[SETTINGS]
    if not _valid_host(request.host):  # it is echoed into continue_url, links and permalinks
        raise BadRequest("invalid Host header")
    base_url = _origin(settings.public_scheme, request.host, settings.public_port)
    # fails closed: these keys set prices, the buyer agent's amount limit and what is offered, so a
    # checkout is not computed without them (page texts, cosmetic, are not read here)
    cs = setting(company, "commerce", commerce, default=_NO_SETTINGS)
    # an unreadable access table fails closed: everything but discovery needs a platform proof
    table = setting(company, "access.levels", access_levels, default=DEFAULT_LEVELS, on_bad=STRICT_LEVELS)
    if effective_mode(company.signature_policy, settings.dev_mode) == "off":
        table = OPEN_LEVELS  # development: nothing is verified, so nothing is gated
    parts = _shop_parts(base_url, settings, cs, neg)
    return CommerceContext(
        company_id=company.id,
        caller=caller,
        now=request.app[CLOCK].now(),
        shop=parts.shop,
        order_ucp=parts.order_ucp,
        version=parts.shop.ucp["version"],
        handler_ids=parts.handler_ids,
        currency=cs.get("currency") or "USD",
        ttl=timedelta(seconds=settings.checkout_ttl),
        max_order_amount=cs.get("buyer_max_order_amount", settings.buyer_max_order_amount),
        pickup_locations=parts.pickup,
        webhook_url=neg.webhook_url if neg and webhooks_for(caller, settings.dev_mode) else None,
        access_level=_access_level(request),
        access_table=table,
    )

"""The buyer rate limit: per access level and per principal, shared by every replica, and never a
refusal in the middle of a checkout a verified platform may complete.

Buckets (:func:`bucket_of`): a verified principal (a signature, an API key, an OAuth token: any
proof that checked out) has its own budget per company, keyed by its platform profile URL, at the
limit of its level; every anonymous caller of a company shares ONE budget (a claimed profile URL
costs nothing to mint). Limits, requests a minute (:func:`limits_for`): ``identified`` and
``linked`` ``Settings.buyer_rate_limit`` (1,200), ``anonymous`` ``Settings.anonymous_rate_limit``
(default: the same); a company's ``settings.access.rate_limits`` (``{"anonymous": n, "identified":
n, "linked": n}``) overrides them. Counting is :class:`ucp_gateway.access.ratelimit.SharedLimiter`
(PostgreSQL, one budget across replicas within its stated error).

Checkout continuation, precisely: a request on an existing checkout session (REST
``/checkout-sessions/{id}`` get, update, complete, cancel; the MCP tools of the same) is never
refused for its principal's budget when (1) the principal is verified, (2) its level may complete
a checkout at this company (the access table's ``checkout.complete``), and (3) the session was
created by that principal and has not expired. Such a request still spends a token when its
principal has one; when it has none it is served on the session's own allowance instead,
``Settings.checkout_session_rate_limit`` requests a minute per session (120, burst 120), which
bounds a runaway loop on one session; past that it is shed with 503 ``unavailable`` and
Retry-After (a platform retries a 503; the largest one never retries a 403 or a 429). Creating a
checkout is new work and spends the budget as anything else.
"""

from __future__ import annotations

import math
import time
from typing import Any

from aiohttp import web

from ..access.ratelimit import SharedLimiter
from ..appkeys import DATABASE, REQ_PRINCIPAL, SETTINGS
from ..company_settings import access_levels, rate_limits, setting
from ..db import tenant_tx
from ..errors import ServiceUnavailable
from ..httpsig.web import effective_mode
from ..levels import DEFAULT_LEVELS, OPEN_LEVELS, STRICT_LEVELS, AccessLevel, permits
from ..logs import get_logger
from ..tenancy import Company
from .context import RateLimited

__all__ = ["BUYER_LIMITER", "bucket_of", "limits_for", "spend_buyer_budget"]

BUYER_LIMITER = web.AppKey("ucpgw.buyer_limiter", SharedLimiter)
ANONYMOUS_BUCKET = "anonymous"
_OWNED_TTL = 30.0  # seconds a "this session is the caller's and open" answer is reused
_OWNED: dict[tuple[Any, str, str], float] = {}
_log = get_logger("ucp_gateway.commerce.budget")


def bucket_of(principal: Any) -> tuple[str, AccessLevel, str | None]:
    """``(bucket, level, profile URL)`` of a request's principal (``request[REQ_PRINCIPAL]``):
    a verified one's own bucket ``p:<profile URL>`` at its level, else the shared anonymous one."""
    profile = getattr(principal, "profile_url", None)
    if principal is not None and getattr(principal, "authenticated", False) and isinstance(profile, str) and profile:
        return "p:" + profile, AccessLevel(getattr(principal, "level", AccessLevel.IDENTIFIED)), profile
    return ANONYMOUS_BUCKET, AccessLevel.ANONYMOUS, None


def limits_for(company: Company, settings: Any) -> dict[str, int]:
    """Requests a minute per level at ``company``: the settings' defaults with the company's
    ``settings.access.rate_limits`` entries applied (an unreadable entry: the defaults)."""
    identified = settings.buyer_rate_limit
    anonymous = settings.anonymous_rate_limit or identified
    out = {AccessLevel.ANONYMOUS: anonymous, AccessLevel.IDENTIFIED: identified, AccessLevel.LINKED: identified}
    # a bad value is an operator's SQL (the write paths refuse it): the platform defaults hold
    return out | setting(company, "access.rate_limits", rate_limits, default={}, on_bad={})


def _may_complete(company: Company, settings: Any, level: AccessLevel) -> bool:
    if effective_mode(company.signature_policy, settings.dev_mode) == "off":
        table = OPEN_LEVELS
    else:
        table = setting(company, "access.levels", access_levels, default=DEFAULT_LEVELS, on_bad=STRICT_LEVELS)
    return permits(table, level, "checkout.complete")


async def _owns_open_session(request: web.Request, company: Company, profile: str, checkout_id: str) -> bool:
    """Whether ``checkout_id`` is a session ``profile`` created at ``company`` that has not expired
    (one indexed read; a yes is reused for 30 s)."""
    key = (company.id, profile, checkout_id)
    now = time.monotonic()
    if _OWNED.get(key, 0.0) > now:
        return True
    if len(checkout_id) > 200:
        return False
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        found = await conn.fetchval(
            "SELECT 1 FROM checkout_sessions WHERE id = $1 AND caller = $2 AND expires_at > now()",
            checkout_id,
            profile,
        )
    if found:
        if len(_OWNED) >= 10_000:
            _OWNED.clear()
        _OWNED[key] = now + _OWNED_TTL
    return bool(found)


async def spend_buyer_budget(request: web.Request, company: Company, *, checkout_id: str | None = None) -> None:
    """Spend one request of the caller's budget (module doc), before any profile fetch or
    dispatch. ``checkout_id``: the checkout session the request acts on, if any (checkout
    continuation). Every door a buyer reaches calls it. No-op without the limiter.
    Raises: RateLimited (429 ``rate_limited``, ``retry_after`` whole seconds, rounded up);
    ServiceUnavailable (503, ``retry_after``) for a continued checkout past its session allowance;
    a database outage as the pool raises it (503)."""
    limiter = request.app.get(BUYER_LIMITER)
    if limiter is None:
        return
    settings = request.app[SETTINGS]
    pool = request.app[DATABASE].pool
    bucket, level, profile = bucket_of(request.get(REQ_PRINCIPAL))
    wait = await limiter.take(pool, company.id, bucket, limits_for(company, settings)[level])
    if not wait:
        return
    retry = {"retry_after": max(1, math.ceil(wait))}
    if checkout_id and profile and _may_complete(company, settings, level):
        if await _owns_open_session(request, company, profile, checkout_id):
            own = await limiter.take(pool, company.id, "checkout:" + checkout_id, settings.checkout_session_rate_limit)
            if not own:
                return
            _log.warning("checkout_session_allowance_spent", company=company.slug, checkout_id=checkout_id)
            raise ServiceUnavailable("too many requests on this checkout session", details={
                "retry_after": max(1, math.ceil(own))})  # fmt: skip
    raise RateLimited("too many requests from this agent", details=retry)

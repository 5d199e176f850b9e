"""Wiring of platform access into the app (one ``app.COMPONENTS`` entry, after the signature layer).

Admin routes (``Authorization: Bearer ucpat_...``)::

    GET /admin/v1/access                    read_only   policy, access table, log-policy counters (7 days)
    PUT /admin/v1/access/policy             admin       {"signature_policy": "required"|"strict"|"optional"|"log"|"off"}

A policy change reaches every replica within ``host_cache_ttl`` seconds (the host cache), no restart.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, SETTINGS
from ..clock import SystemClock
from ..company_settings import access_levels, setting
from ..db import tenant_tx
from ..errors import BadRequest
from ..httpsig.web import POLICY_COUNTER, PROOF_VERIFIERS, effective_mode
from ..jsonbody import InvalidJson, loads_strict
from ..keys.admin_tokens import StaffPrincipal
from ..keys.web import admin_route
from ..levels import DEFAULT_LEVELS, STRICT_LEVELS
from ..logs import get_logger
from ..mediatype import require_json_body
from ..tenancy import SIGNATURE_POLICIES, get_company
from .counts import count_refusal, refusal_counts

__all__ = ["setup"]

_log = get_logger("ucp_gateway.access")


def _today(request: web.Request) -> dt.date:
    return (request.app.get(CLOCK) or SystemClock()).now().astimezone(dt.UTC).date()


async def _count(request: web.Request, company, reason: str) -> None:
    """``httpsig.web.POLICY_COUNTER``: one more ``reason`` for the company today, and a log line."""
    _log.info("signature_policy_log", company=company.slug, reason=reason, path=request.path)
    await count_refusal(request.app[DATABASE].pool, company.id, _today(request), reason)


@admin_route("read_only")
async def access_get(request: web.Request, p: StaffPrincipal) -> Any:
    pool = request.app[DATABASE].pool
    company = await get_company(pool, str(p.company_id))
    table = setting(company, "access.levels", access_levels, default=DEFAULT_LEVELS, on_bad=STRICT_LEVELS)
    settings = request.app[SETTINGS]
    return {
        "signature_policy": company.signature_policy,
        "effective_policy": effective_mode(company.signature_policy, settings.dev_mode),
        "levels": {op: str(level) for op, level in table.items()},
        "log_policy_counts": await refusal_counts(pool, p.company_id, _today(request) - dt.timedelta(days=6)),
    }


@admin_route("admin")
async def policy_put(request: web.Request, p: StaffPrincipal) -> Any:
    raw = await request.read()
    require_json_body(request, raw)
    try:
        data = loads_strict(raw or b"{}")
    except InvalidJson as exc:
        raise BadRequest(f"body must be JSON: {exc}") from None
    policy = data.get("signature_policy") if isinstance(data, dict) else None
    policy = "required" if policy == "strict" else policy
    if policy not in SIGNATURE_POLICIES:
        raise BadRequest(f"signature_policy must be one of strict, {', '.join(SIGNATURE_POLICIES)}")
    if policy == "off" and not request.app[SETTINGS].dev_mode:
        raise BadRequest("signature_policy off is for development deployments only")
    async with tenant_tx(request.app[DATABASE].pool, p.company_id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = $2 WHERE id = $1", p.company_id, policy)
    _log.info("signature_policy_changed", company_id=str(p.company_id), policy=policy, actor=p.actor)
    return {"signature_policy": policy}


def setup(app: web.Application) -> None:
    """Install the log-policy counter and the admin routes; the proof verifiers append themselves to
    ``app[PROOF_VERIFIERS]`` (read by the signature layer on every request)."""
    app.setdefault(PROOF_VERIFIERS, [])
    app[POLICY_COUNTER] = _count
    app.router.add_get("/admin/v1/access", access_get)
    app.router.add_put("/admin/v1/access/policy", policy_put)

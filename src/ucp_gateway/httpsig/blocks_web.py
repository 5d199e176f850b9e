"""Admin API for blocks and profile purges (:mod:`.blocks`), ``Authorization: Bearer ucpat_...``::

    GET    /admin/v1/blocks                  admin   {"blocks": [{"kind","value","reason","created_by","created_at"}]}
    POST   /admin/v1/blocks                  admin   {"kind": "kid"|"thumbprint"|"profile", "value", "reason"?}
    POST   /admin/v1/blocks/remove           admin   {"kind", "value"}: lift a block (404 when none)
    POST   /admin/v1/profiles/purge          admin   {"profile_url"}: every process drops its cached copy

Each takes effect on every process within ``block_cache_ttl`` seconds (2 s).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE
from ..clock import SystemClock
from ..errors import BadRequest
from ..jsonbody import InvalidJson, loads_strict
from ..keys.admin_tokens import StaffPrincipal
from ..keys.web import admin_route
from ..mediatype import require_json_body
from .blocks import add_block, list_blocks, purge_profile, remove_block

__all__ = ["add_routes"]


async def _body(request: web.Request, *names: str) -> dict[str, Any]:
    raw = await request.read()
    require_json_body(request, raw)
    try:
        data = loads_strict(raw or b"{}")
    except InvalidJson as exc:
        raise BadRequest(f"body must be JSON: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(n), str) for n in names):
        raise BadRequest(f"body must be a JSON object with string members {', '.join(names)}")
    return data


def _now(request: web.Request):
    return (request.app.get(CLOCK) or SystemClock()).now()


@admin_route("admin")
async def list_handler(request: web.Request, p: StaffPrincipal) -> Any:
    return {"blocks": await list_blocks(request.app[DATABASE].pool, p.company_id)}


@admin_route("admin")
async def add_handler(request: web.Request, p: StaffPrincipal) -> Any:
    data = await _body(request, "kind", "value")
    block = await add_block(
        request.app[DATABASE].pool, p.company_id, data["kind"], data["value"], reason=data.get("reason", ""),
        actor=p.actor, now=_now(request),
    )  # fmt: skip
    return {"block": block}


@admin_route("admin")
async def remove_handler(request: web.Request, p: StaffPrincipal) -> Any:
    data = await _body(request, "kind", "value")
    await remove_block(request.app[DATABASE].pool, p.company_id, data["kind"], data["value"])
    return {"removed": {"kind": data["kind"], "value": data["value"]}}


@admin_route("admin")
async def purge_handler(request: web.Request, p: StaffPrincipal) -> Any:
    data = await _body(request, "profile_url")
    await purge_profile(request.app[DATABASE].pool, p.company_id, data["profile_url"])
    return {"purged": data["profile_url"]}


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/blocks", list_handler)
    app.router.add_post("/admin/v1/blocks", add_handler)
    app.router.add_post("/admin/v1/blocks/remove", remove_handler)
    app.router.add_post("/admin/v1/profiles/purge", purge_handler)

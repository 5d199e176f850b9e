"""Admin API of the signature subsystem: blocks and profile purges (:mod:`.blocks`) and the signature
debugger (:mod:`.debug`), ``Authorization: Bearer ucpat_...`` (:func:`ucp_gateway.keys.web.admin_route`)::

    GET    /admin/v1/blocks                  admin   {"blocks": [{"kind","value","reason","created_by","created_at"}]}
    POST   /admin/v1/blocks                  admin   {"kind": "kid"|"thumbprint"|"profile", "value", "reason"?}
    POST   /admin/v1/blocks/remove           admin   {"kind", "value"}: lift a block (404 when none)
    POST   /admin/v1/profiles/purge          admin   {"profile_url"}: every process drops its cached copy
    POST   /admin/v1/signatures/debug        admin   body: a raw HTTP request (text), or {"request": "..."}

Blocks and purges take effect on every process within ``block_cache_ttl`` seconds (2 s).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, SETTINGS
from ..clock import SystemClock
from ..errors import BadRequest
from ..jsonbody import InvalidJson, loads_strict
from ..keys.admin_tokens import StaffPrincipal
from ..keys.web import admin_route
from ..mediatype import read_json_object
from .blocks import add_block, list_blocks, purge_profile, remove_block
from .debug import debug_signature
from .web import _DEFAULT_RESOLVER, KEY_RESOLVER, policy_from_settings

__all__ = ["add_routes"]

_MAX_DEBUG = 256 * 1024  # bytes of the raw request the debugger reads


async def _body(request: web.Request, *names: str) -> dict[str, Any]:
    data = await read_json_object(request)
    if not all(isinstance(data.get(n), str) for n in names):
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


@admin_route("admin")
async def debug_handler(request: web.Request, p: StaffPrincipal) -> Any:
    raw = await request.read()
    if not raw or len(raw) > _MAX_DEBUG:
        raise BadRequest("send the raw HTTP request (at most 256 KiB) as the body")
    if request.content_type == "application/json":
        try:
            raw = loads_strict(raw)["request"].encode("latin-1")
        except (InvalidJson, ValueError, KeyError, TypeError, AttributeError):
            raise BadRequest('JSON body must be {"request": "<raw HTTP request>"}') from None
    resolver = request.app.get(KEY_RESOLVER) or request.app[_DEFAULT_RESOLVER]
    settings = request.app[SETTINGS]
    return await debug_signature(
        raw,
        resolver=resolver,
        policy=policy_from_settings(settings),
        now=_now(request),
        scheme=settings.public_scheme,
        cache_age=getattr(resolver, "cache_age", None),
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/blocks", list_handler)
    app.router.add_post("/admin/v1/blocks", add_handler)
    app.router.add_post("/admin/v1/blocks/remove", remove_handler)
    app.router.add_post("/admin/v1/profiles/purge", purge_handler)
    app.router.add_post("/admin/v1/signatures/debug", debug_handler)

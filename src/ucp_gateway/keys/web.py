"""Admin REST API for keys and admin tokens; wiring of the keys subsystem into the app.

Routes (``Authorization: Bearer ucpat_...``; roles read_only < employee < admin < owner)::

    GET  /admin/v1/keys                      read_only   list keys (no private material, ever)
    POST /admin/v1/keys/rotate               admin       new pending key
    POST /admin/v1/keys/{kid}/activate       admin       pending -> active (after publish_min)
    POST /admin/v1/keys/{kid}/schedule       admin       {"activate_at": RFC 3339 | null}: a pending key's activation
    POST /admin/v1/keys/{kid}/retire         admin       rotating/pending -> retired
    POST /admin/v1/keys/{kid}/compromise     owner       unpublish at once, replace if active
    GET  /admin/v1/admin-tokens              admin       list staff tokens (never their text)
    POST /admin/v1/admin-tokens              owner       body {"role", "label"?, "expires"?}: a new token, shown once
    POST /admin/v1/admin-tokens/{id}/revoke  owner       (or the token itself) refused everywhere from the next request

The lifecycle POSTs take an optional ``{"reason": "..."}``; a body under another type than
``application/json`` is 415 ``unsupported_media_type``.

``setup(app)`` also loads the KEK ring, attaches the vault to the pool and starts the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, REQ_PRINCIPAL, SETTINGS
from ..clock import SystemClock
from ..errors import BadRequest, ConfigError, GatewayError
from ..mediatype import json_response, read_json_object
from ..tenancy import resolve_host
from .admin_tokens import (
    AdminAuthError,
    StaffPrincipal,
    authenticate_admin,
    create_admin_token,
    list_admin_tokens,
    parse_expiry,
    require_role,
    revoke_admin_token,
)
from .envelope import KekRing
from .repository import (
    Vault,
    apply_event,
    attach_vault,
    compromise_key,
    list_keys,
    parse_activate_at,
    rotate,
    schedule_activation,
)
from .scheduler import run_forever

__all__ = ["VAULT", "admin_route", "load_ring", "setup"]

log = logging.getLogger(__name__)
VAULT = web.AppKey("ucpgw.keys.vault", Vault)

Handler = Callable[[web.Request, StaffPrincipal], Awaitable[Any]]


def load_ring(settings) -> KekRing:
    """The KEK ring from settings (env text, secret file, or a generated dev ring)."""
    return KekRing.load(
        ring_text=settings.kek_ring.get_secret_value() if settings.kek_ring else None,
        ring_file=settings.kek_file,
        current=settings.kek_current,
        keys_dir=settings.keys_dir,
        dev_mode=settings.dev_mode,
    )


def _admin(floor: str) -> Callable[[Handler], Callable[[web.Request], Awaitable[web.StreamResponse]]]:
    """Authenticate the bearer token, check the host's company and the role floor, render errors."""

    def wrap(fn: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            pool = request.app[DATABASE].pool
            try:
                principal = await authenticate_admin(pool, request.headers.get("Authorization"))
                company = request.get(REQ_COMPANY) if REQ_COMPANY in request else await resolve_host(pool, request.host)
                if company is not None and company.id != principal.company_id:
                    raise AdminAuthError("a valid admin bearer token is required")
                request[REQ_PRINCIPAL] = principal
                require_role(principal, floor)
                return json_response(await fn(request, principal))
            except GatewayError as exc:
                return json_response(exc.to_body(), status=exc.http_status)

        return handler

    return wrap


admin_route = _admin  # the public name, for other subsystems' admin API routes


async def _reason(request: web.Request) -> str:
    data = await read_json_object(request, example='{"reason": "..."}')
    reason = data.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 500:
        raise BadRequest("reason must be a string of at most 500 characters")
    return reason


def _now(request: web.Request):
    return (request.app.get(CLOCK) or SystemClock()).now()


@_admin("read_only")
async def list_handler(request: web.Request, p: StaffPrincipal) -> Any:
    return {"keys": [k.to_json() for k in await list_keys(request.app[DATABASE].pool, p.company_id)]}


@_admin("admin")
async def rotate_handler(request: web.Request, p: StaffPrincipal) -> Any:
    key = await rotate(
        request.app[DATABASE].pool,
        p.company_id,
        actor=p.actor,
        reason=await _reason(request) or "rotate",
        now=_now(request),
    )
    return {"key": key.to_json()}


def _transition_handler(event: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``POST /admin/v1/keys/{kid}/{event}`` (admin): one lifecycle event through the state machine."""

    @_admin("admin")
    async def handler(request: web.Request, p: StaffPrincipal) -> Any:
        kid = request.match_info["kid"]
        extra = {"publish_min": request.app[SETTINGS].keys_publish_min} if event == "activate" else {}
        state = await apply_event(
            request.app[DATABASE].pool,
            p.company_id,
            kid,
            event,
            actor=p.actor,
            reason=await _reason(request) or event,
            now=_now(request),
            **extra,
        )
        return {"kid": kid, "state": state.value}

    return handler


@_admin("admin")
async def schedule_handler(request: web.Request, p: StaffPrincipal) -> Any:
    """``POST /admin/v1/keys/{kid}/schedule``: the scheduler activates the pending key at ``activate_at``
    (null: back to the default, ``keys_publish_min`` after it was published)."""
    data = await read_json_object(request)
    if "activate_at" not in data:
        raise BadRequest('body must be {"activate_at": "<RFC 3339 time>" | null}')
    key = await schedule_activation(
        request.app[DATABASE].pool, p.company_id, request.match_info["kid"], parse_activate_at(data["activate_at"]),
        actor=p.actor, now=_now(request), publish_min=request.app[SETTINGS].keys_publish_min,
    )  # fmt: skip
    return key.to_json()


@_admin("owner")
async def compromise_handler(request: web.Request, p: StaffPrincipal) -> Any:
    kid = request.match_info["kid"]
    new = await compromise_key(
        request.app[DATABASE].pool,
        p.company_id,
        kid,
        actor=p.actor,
        reason=await _reason(request) or "compromised",
        now=_now(request),
    )
    return {"kid": kid, "state": "compromised", "active_kid": new}


@_admin("admin")
async def tokens_list_handler(request: web.Request, p: StaffPrincipal) -> Any:
    return {"admin_tokens": await list_admin_tokens(request.app[DATABASE].pool, p.company_id, now=_now(request))}


@_admin("owner")
async def tokens_create_handler(request: web.Request, p: StaffPrincipal) -> Any:
    data = await read_json_object(request)
    role, label = data.get("role"), data.get("label", "")
    if not isinstance(label, str) or len(label) > 200:
        raise BadRequest("label must be a string of at most 200 characters")
    expires = data.get("expires")
    if expires is not None and not isinstance(expires, str):
        raise BadRequest("expires must be a string: a span (90m, 12h, 30d) or an RFC 3339 date-time")
    now = _now(request)
    until = parse_expiry(expires, now)
    token, tid = await create_admin_token(
        request.app[DATABASE].pool, p.company_id, role if isinstance(role, str) else "", now=now, label=label,
        expires_at=until,
    )  # fmt: skip
    expires_at = until.isoformat().replace("+00:00", "Z") if until else None
    return {"token": token, "token_id": str(tid), "role": role, "expires_at": expires_at}


@_admin("read_only")
async def tokens_revoke_handler(request: web.Request, p: StaffPrincipal) -> Any:
    """``POST /admin/v1/admin-tokens/{id}/revoke``: an owner revokes any of the company's tokens; any
    token may revoke itself (a holder who leaked it need not find an owner first)."""
    from uuid import UUID

    from ..errors import NotFound

    try:
        tid = UUID(request.match_info["token_id"])
    except ValueError:
        raise NotFound("no such token") from None
    if tid != p.token_id:
        require_role(p, "owner")
    pool = request.app[DATABASE].pool
    if not any(t["token_id"] == str(tid) for t in await list_admin_tokens(pool, p.company_id, now=_now(request))):
        raise NotFound("no such token")
    was_active = await revoke_admin_token(pool, p.company_id, tid, now=_now(request))
    return {"token_id": str(tid), "state": "revoked", "was_active": was_active}


async def _keys_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    pool = app[DATABASE].pool
    try:
        vault = Vault(load_ring(settings))
    except ConfigError as exc:
        # Verification needs no KEK; anything that must sign fails closed with this reason.
        log.warning("keys: %s; responses and webhooks cannot be signed", exc.message)
    else:
        app[VAULT] = vault
        attach_vault(pool, vault)
    clock = app.get(CLOCK) or SystemClock()
    task = asyncio.create_task(
        run_forever(
            pool,
            now=clock.now,
            interval=settings.keys_scheduler_interval,
            publish_min=settings.keys_publish_min,
            rotating_grace=settings.keys_rotating_grace,
            vault=app.get(VAULT),
        )
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if VAULT in app:
            app[VAULT].clear()  # decrypted keys do not outlive the app


def setup(app: web.Application) -> None:
    """Add the admin routes, the KEK vault and the key scheduler to ``app``."""
    app.router.add_get("/admin/v1/keys", list_handler)
    app.router.add_post("/admin/v1/keys/rotate", rotate_handler)
    app.router.add_post("/admin/v1/keys/{kid}/activate", _transition_handler("activate"))
    app.router.add_post("/admin/v1/keys/{kid}/retire", _transition_handler("retire"))
    app.router.add_post("/admin/v1/keys/{kid}/schedule", schedule_handler)
    app.router.add_post("/admin/v1/keys/{kid}/compromise", compromise_handler)
    app.router.add_get("/admin/v1/admin-tokens", tokens_list_handler)
    app.router.add_post("/admin/v1/admin-tokens", tokens_create_handler)
    app.router.add_post("/admin/v1/admin-tokens/{token_id}/revoke", tokens_revoke_handler)
    from .pages import setup_pages

    setup_pages(app)  # the admin's browser pages (sign-in, keys)
    app.cleanup_ctx.append(_keys_ctx)

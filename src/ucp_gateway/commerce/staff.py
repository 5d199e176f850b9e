"""Staff views of the company's real UCP orders: list and show, with fulfillment events,
adjustments, payments and the webhook delivery state of each order.

One set of repository reads serves every door: the staff verbs ``orders.list`` / ``orders.show``
(agent dispatch, the CLI's remote mode, MCP, WebMCP), the admin API ``GET /admin/v1/orders`` and
``GET /admin/v1/orders/{id}``, and the local ``ucp-gateway orders list|show``. Every read runs in
the company's tenant transaction (RLS). Buyer-facing reads stay in :mod:`.service` (``get_order``
answers only the platform that placed the order, UCP order.md); staff see every order.

Money is integer minor units beside ``currency``; times are RFC 3339 UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
from aiohttp import web

from ..appkeys import DATABASE
from ..cursors import decode_cursor, encode_cursor
from ..db import tenant_tx
from ..errors import BadRequest, NotFound
from ..keys.admin_tokens import StaffPrincipal
from ..keys.web import admin_route
from ..verbs.context import VerbContext
from ..verbs.errors import VerbError
from ..verbs.policy import RiskClass, VerbPolicy
from ..verbs.registry import Registry
from . import repo
from .checkout import rfc3339
from .context import UNVERIFIED
from .orders import order_from_rows

__all__ = ["MAX_PAGE", "list_orders", "provide", "setup_admin", "show_order", "webhook_state"]

MAX_PAGE = 100
_ID = {"type": "string", "minLength": 1, "maxLength": 200}


def webhook_state(row: Any) -> str:
    """``delivered`` / ``queued`` (due again later; ``attempts`` > 0 means it failed before) /
    ``dead`` (a dead letter: the retry budget is spent or the target refused for good; ``ucp-gateway
    webhooks retry`` queues it again): from one ``webhook_outbox`` row."""
    if row["delivered_at"] is not None:
        return "delivered"
    return "dead" if row["dead_at"] is not None else "queued"


def _webhook_wire(row: Any) -> dict[str, Any]:
    return {
        "webhook_id": str(row["id"]),
        "event_type": row["event_type"],
        "state": webhook_state(row),
        "attempts": row["attempts"],
        "target_url": row["target_url"],
        "created_at": rfc3339(row["created_at"]),
        "next_attempt_at": rfc3339(row["next_attempt_at"]),
        "delivered_at": rfc3339(row["delivered_at"]) if row["delivered_at"] else None,
        "dead_at": rfc3339(row["dead_at"]) if row["dead_at"] else None,
        "last_error": row["last_error"],
    }


def _platform(caller: str) -> dict[str, Any]:
    """``{"platform": profile URL, "platform_verified": bool}`` of an order's ``caller`` (a verified
    signer's profile URL, or :data:`.context.UNVERIFIED` + the URL it claimed)."""
    if caller.startswith(UNVERIFIED):
        return {"platform": caller[len(UNVERIFIED) :], "platform_verified": False}
    return {"platform": caller, "platform_verified": True}


def _page_key(created_at: datetime, order_id: str) -> str:
    return f"{created_at.isoformat()}|{order_id}"


def _parse_key(cursor: str) -> tuple[datetime, str]:
    key = decode_cursor(cursor, max_length=300)
    when, sep, oid = key.partition("|")
    try:
        if not sep or not oid:
            raise ValueError
        return datetime.fromisoformat(when), oid
    except ValueError:
        raise BadRequest("invalid cursor", code="invalid_cursor") from None


async def list_orders(conn: asyncpg.Connection, *, limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
    """Newest first: ``{"orders": [summary...], "next_cursor": str | None}``.

    A summary is ``{id, label, checkout_id, platform, platform_verified, currency, total,
    line_items (count), created_at, webhooks: {delivered, queued, dead} (counts)}``; ``platform`` is
    the profile URL of the platform that placed it (``platform_verified``: it signed its requests).
    ``limit`` 1..100. Raises BadRequest (``invalid_cursor``) for a cursor this listing did not write."""
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}")
    where, args = "", [limit + 1]
    if cursor is not None:
        when, oid = _parse_key(cursor)
        where, args = "WHERE (o.created_at, o.id) < ($2, $3)", [limit + 1, when, oid]
    rows = await conn.fetch(
        "SELECT o.id, o.checkout_id, o.caller, o.currency, o.total, o.created_at,"
        " o.snapshot->>'label' AS label, jsonb_array_length(o.snapshot->'line_items') AS line_count,"
        " w.delivered, w.queued, w.dead"
        " FROM orders o CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL) AS delivered,"
        "   count(*) FILTER (WHERE delivered_at IS NULL AND dead_at IS NULL) AS queued,"
        "   count(*) FILTER (WHERE delivered_at IS NULL AND dead_at IS NOT NULL) AS dead"
        "   FROM webhook_outbox WHERE order_id = o.id) w"
        f" {where} ORDER BY o.created_at DESC, o.id DESC LIMIT $1",
        *args,
    )
    page = rows[:limit]
    out = [
        {
            "id": r["id"],
            "label": r["label"],
            "checkout_id": r["checkout_id"],
            **_platform(r["caller"]),
            "currency": r["currency"].strip(),
            "total": r["total"],
            "line_items": r["line_count"],
            "created_at": rfc3339(r["created_at"]),
            "webhooks": {"delivered": r["delivered"], "queued": r["queued"], "dead": r["dead"]},
        }
        for r in page
    ]
    nxt = encode_cursor(_page_key(page[-1]["created_at"], page[-1]["id"])) if len(rows) > limit else None
    return {"orders": out, "next_cursor": nxt}


async def show_order(conn: asyncpg.Connection, order_id: str) -> dict[str, Any]:
    """One order as staff see it: ``{"order": <the UCP order entity without its ucp envelope>,
    "platform", "platform_verified", "created_at", "payments": [...], "webhooks": [...]}``.
    Payments carry the handler and instrument ids, amount and status, never a credential or token
    reference. Raises NotFound (404 ``not_found``)."""
    order, events, adjs = await repo.get_order_rows(conn, order_id)
    if order is None:
        raise NotFound(f"no order {order_id!r}")
    body = order_from_rows(order, events, adjs, {})
    body.pop("ucp", None)
    pays = await conn.fetch(
        "SELECT id, handler_id, instrument_id, amount, currency, status, created_at FROM payments"
        " WHERE order_id = $1 ORDER BY created_at",
        order_id,
    )
    hooks = await conn.fetch("SELECT * FROM webhook_outbox WHERE order_id = $1 ORDER BY created_at", order_id)
    return {
        "order": body,
        **_platform(order["caller"]),
        "created_at": rfc3339(order["created_at"]),
        "payments": [
            {
                "id": p["id"],
                "handler_id": p["handler_id"],
                "instrument_id": p["instrument_id"],
                "amount": p["amount"],
                "currency": p["currency"].strip(),
                "status": p["status"],
                "created_at": rfc3339(p["created_at"]),
            }
            for p in pays
        ],
        "webhooks": [_webhook_wire(h) for h in hooks],
    }


async def _list_verb(ctx: VerbContext) -> dict[str, Any]:
    try:
        page = await list_orders(ctx.conn, limit=int(ctx.args.get("limit", 20)), cursor=ctx.args.get("cursor"))
    except BadRequest as exc:
        raise VerbError("invalid_arguments", exc.message, path="$.cursor") from None
    return {"entity_id": "orders", "entity_type": "order_list", "data": page, "relations": []}


async def _show_verb(ctx: VerbContext) -> dict[str, Any]:
    oid = ctx.args["order_id"]
    try:
        view = await show_order(ctx.conn, oid)
    except NotFound:
        raise VerbError("not_found", f"no order {oid!r}", path="$.order_id") from None
    ctx.set_entity("order", oid)
    return {"entity_id": oid, "entity_type": "order", "data": view, "relations": []}


def provide(registry: Registry) -> None:
    """Register the staff order verbs (READ, role ``employee``: orders hold buyers' addresses)."""
    policy = VerbPolicy(RiskClass.READ, role_floor="employee", principals=frozenset({"staff"}), subagent="sales")
    registry.register(
        {
            "name": "orders.list",
            "shape": "aggregate",
            "description": "Staff: the company's UCP orders, newest first, with webhook delivery counts.",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
                    "cursor": {"type": "string", "maxLength": 1200},
                },
                "required": [],
            },
        },
        policy,
        _list_verb,
    )
    registry.register(
        {
            "name": "orders.show",
            "shape": "aggregate",
            "description": "Staff: one UCP order with its events, adjustments, payments and webhook deliveries.",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"order_id": _ID},
                "required": ["order_id"],
            },
        },
        policy,
        _show_verb,
    )


def _limit(value: str | None) -> int:
    if value is None:
        return 20
    if not value.isdigit() or len(value) > 4:
        raise BadRequest(f"limit must be an integer between 1 and {MAX_PAGE}")
    return int(value)


@admin_route("employee")
async def list_handler(request: web.Request, p: StaffPrincipal) -> Any:
    """``GET /admin/v1/orders?limit=&cursor=`` (employee): :func:`list_orders`."""
    q = request.query
    async with tenant_tx(request.app[DATABASE].pool, p.company_id) as conn:
        return await list_orders(conn, limit=_limit(q.get("limit")), cursor=q.get("cursor"))


@admin_route("employee")
async def show_handler(request: web.Request, p: StaffPrincipal) -> Any:
    """``GET /admin/v1/orders/{id}`` (employee): :func:`show_order`; 404 ``not_found``."""
    async with tenant_tx(request.app[DATABASE].pool, p.company_id) as conn:
        return await show_order(conn, request.match_info["id"])


def setup_admin(app: web.Application) -> None:
    """Add the staff order routes of the admin API."""
    app.router.add_get("/admin/v1/orders", list_handler)
    app.router.add_get("/admin/v1/orders/{id}", show_handler)

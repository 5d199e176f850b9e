"""Order operations (imperative shell, UCP order.md): read an order, and the merchant's simulated
shipment (an appended ``shipped`` event and its ``order.updated`` webhook). One call = reads and
writes in the caller's tenant transaction; each returns an :class:`.service.Outcome`.
"""

from __future__ import annotations

import uuid

import asyncpg

from ..versions import VERSIONS, to_wire
from . import repo
from .orders import order_from_rows, shipped_event
from .service import CommerceContext, Outcome, not_found

__all__ = ["get_order", "simulate_shipping"]


async def _order_body(conn: asyncpg.Connection, ctx: CommerceContext, order_id: str):
    order, events, adjs = await repo.get_order_rows(conn, order_id)
    if order is None or order["caller"] != ctx.caller:  # only the platform that placed it (UCP order.md)
        return None, None
    return order, order_from_rows(order, events, adjs, ctx.order_ucp)


async def get_order(conn: asyncpg.Connection, ctx: CommerceContext, order_id: str) -> Outcome:
    """``GET /orders/{id}``: the full order; 200 ``not_found`` envelope for unknown or foreign orders."""
    _, body = await _order_body(conn, ctx, order_id)
    return not_found(ctx, "Order") if body is None else Outcome(200, body)


async def simulate_shipping(conn: asyncpg.Connection, ctx: CommerceContext, order_id: str) -> Outcome:
    """Append a ``shipped`` event and queue the ``order updated`` webhook with the full order.

    ``ctx.caller`` is ignored: the simulation acts as the merchant, for any order of the company.
    """
    order = await conn.fetchrow("SELECT * FROM orders WHERE id = $1 FOR UPDATE", order_id)
    if order is None:
        return not_found(ctx, "Order")
    ev = shipped_event(order["snapshot"], event_id=f"evt_{uuid.uuid4().hex}", now=ctx.now)
    await repo.insert_event(conn, ctx.company_id, order_id, ev)
    # the event goes to the platform that placed the order, in the version it completed under: the
    # envelope of its order.created event (this request's own when that row was swept)
    placed = await conn.fetchval(
        "SELECT convert_from(payload, 'UTF8')::json -> 'ucp' FROM webhook_outbox"
        " WHERE order_id = $1 AND event_type = 'order.created' LIMIT 1",
        order_id,
    )
    owner = {"caller": order["caller"]}
    if isinstance(placed, dict) and placed.get("version") in VERSIONS:
        owner.update(order_ucp=placed, version=placed["version"])
    owner_ctx = CommerceContext(**{**ctx.__dict__, **owner})
    _, body = await _order_body(conn, owner_ctx, order_id)
    body = to_wire("order", body, owner_ctx.version)
    await repo.insert_outbox(
        conn,
        ctx.company_id,
        order_id=order_id,
        event_type="order.updated",
        caller=order["caller"],
        payload=body,
        target_url=await conn.fetchval(
            "SELECT target_url FROM webhook_outbox WHERE order_id = $1 AND target_url IS NOT NULL LIMIT 1",
            order_id,
        ),
        now=ctx.now,
    )
    return Outcome(200, body)

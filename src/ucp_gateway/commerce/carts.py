"""UCP carts (``dev.ucp.shopping.cart``; UCP cart index.md, rest.md, mcp.md): create, get, update
(full replacement), cancel, and the cart side of create-checkout with ``cart_id``.

A cart is the platform's writable state (``line_items``, ``context``, ``buyer``, ``discounts``,
``attribution``) in table ``carts`` (migration 0066). Its line items, totals, discounts and
messages are priced on every answer by the checkout's own :func:`.checkout.price_checkout` (one
pricing code, through :func:`.service.price_state`: the same catalogue read, stock, codes and
automatic discounts), as estimates. A cart belongs to the buyer agent that created it; another
caller gets ``not_found``. Cancel deletes it and answers the state it had; afterwards every
operation answers ``not_found``.

Create-checkout is answered here (:func:`create_checkout`): with ``cart_id`` from the cart, else
by :func:`.service.create` alone. Imports point one way: this module builds on ``service``.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncpg

from ..versions import from_wire
from . import service
from .checkout import rfc3339
from .messages import error_envelope
from .service import UCP_VERSION, CommerceContext, Outcome, price_state
from .status import TERMINAL
from .validation import InvalidRequest, parse_state

__all__ = ["CART", "CART_TTL", "cancel", "checkout_input", "create", "create_checkout", "get", "update"]

CART = "dev.ucp.shopping.cart"
CART_TTL = timedelta(days=7)
_CART_KEYS = ("line_items", "context", "buyer", "discounts", "attribution")


def _cart_state(data: Any, *, path_id: str | None = None) -> dict[str, Any]:
    """Validate a cart create/update body (the checkout's line item, buyer, context and discount
    rules: quantities 1..MAX_QUANTITY as JSON integers, bounded lists). ``id`` in an update body
    must be the cart's own (UCP 2026-04-08 sent it; 2026-08-25 omits it). Raises InvalidRequest."""
    if not isinstance(data, dict):
        raise InvalidRequest("$: the cart must be a JSON object")
    if "id" in data and (path_id is None or data["id"] != path_id):
        raise InvalidRequest("$.id: a cart body carries no id (the cart id is in the path or arguments.id)")
    if "line_items" not in data:
        raise InvalidRequest("$.line_items: required")
    state = parse_state({k: v for k, v in data.items() if k in _CART_KEYS}, update=False)
    return {k: v for k, v in state.items() if k in _CART_KEYS}


def _ucp(ctx: CommerceContext) -> dict[str, Any]:
    """The cart response ``ucp``: the negotiated cart capability and its extensions (no handlers)."""
    caps = ctx.shop.ucp.get("capabilities") or {}
    mine = {n: v for n, v in caps.items() if n == CART or n == "dev.ucp.shopping.discount"}
    version = ctx.shop.ucp.get("version", UCP_VERSION)
    caps = mine if CART in mine else {CART: [{"version": version}]}
    return {"version": version, "status": "success", "capabilities": caps}


def render_cart(ctx: CommerceContext, cart_id: str, state: dict[str, Any], priced, expires_at) -> dict[str, Any]:
    """The cart resource (S:shopping/cart.json): priced line items and estimated totals."""
    body: dict[str, Any] = {
        "ucp": _ucp(ctx),
        "id": cart_id,
        "line_items": priced.line_items,
        "currency": ctx.currency,
        "totals": priced.totals,
        "messages": [m for m in priced.messages if m.get("code") != "missing"],
        "continue_url": f"{ctx.shop.base_url}/carts/{cart_id}",
        "expires_at": rfc3339(expires_at),
    }
    for key in ("buyer", "context", "attribution"):
        if state.get(key) is not None:
            body[key] = state[key]
    if priced.discounts is not None:
        body["discounts"] = priced.discounts
    return body


def _not_found(ctx: CommerceContext) -> Outcome:
    body = error_envelope(ctx.shop.ucp.get("version", UCP_VERSION), "not_found", "Cart not found",
                          continue_url=ctx.shop.base_url + "/")  # fmt: skip
    return Outcome(200, body)


async def _row(conn: asyncpg.Connection, ctx: CommerceContext, cart_id: str, *, lock: bool = False):
    sql = "SELECT * FROM carts WHERE id = $1" + (" FOR UPDATE" if lock else "")
    row = await conn.fetchrow(sql, cart_id)
    if row is None or row["caller"] != ctx.caller or row["expires_at"] <= ctx.now:
        return None
    return row


async def create(conn: asyncpg.Connection, ctx: CommerceContext, data: Any) -> Outcome:
    """``POST /carts``: 201 with the priced cart; 200 error envelope (no id) when no item can be sold."""
    state = _cart_state(from_wire("cart.request", data, ctx.version))
    priced = await price_state(conn, ctx, state)
    if priced.nothing_purchasable:
        msgs = [dict(m, severity="unrecoverable") for m in priced.messages if m["type"] == "error"]
        return Outcome(200, {"ucp": dict(_ucp(ctx), status="error"), "messages": msgs})
    cart_id = f"cart_{uuid.uuid4().hex}"
    expires_at = ctx.now + CART_TTL
    await (ctx.last_write or conn.execute)(
        "INSERT INTO carts (company_id, id, caller, state, created_at, updated_at, expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $5, $6)",
        ctx.company_id, cart_id, ctx.caller, state, ctx.now, expires_at,
    )  # fmt: skip
    return Outcome(201, render_cart(ctx, cart_id, state, priced, expires_at))


async def get(conn: asyncpg.Connection, ctx: CommerceContext, cart_id: str) -> Outcome:
    """``GET /carts/{id}``: the cart priced now; unknown, expired, canceled or foreign: ``not_found``."""
    row = await _row(conn, ctx, cart_id)
    if row is None:
        return _not_found(ctx)
    priced = await price_state(conn, ctx, row["state"])
    return Outcome(200, render_cart(ctx, cart_id, row["state"], priced, row["expires_at"]))


async def update(conn: asyncpg.Connection, ctx: CommerceContext, cart_id: str, data: Any) -> Outcome:
    """``PUT /carts/{id}``: full replacement of the writable state (UCP: the platform sends the
    whole cart; what it leaves out is gone)."""
    state = _cart_state(from_wire("cart.request", data, ctx.version), path_id=cart_id)
    row = await _row(conn, ctx, cart_id, lock=True)
    if row is None:
        return _not_found(ctx)
    priced = await price_state(conn, ctx, state)
    await (ctx.last_write or conn.execute)(
        "UPDATE carts SET state = $2, updated_at = $3 WHERE id = $1", cart_id, state, ctx.now
    )
    return Outcome(200, render_cart(ctx, cart_id, state, priced, row["expires_at"]))


async def cancel(conn: asyncpg.Connection, ctx: CommerceContext, cart_id: str) -> Outcome:
    """``POST /carts/{id}/cancel``: delete the cart and answer its state before deletion."""
    row = await _row(conn, ctx, cart_id, lock=True)
    if row is None:
        return _not_found(ctx)
    priced = await price_state(conn, ctx, row["state"])
    body = render_cart(ctx, cart_id, row["state"], priced, row["expires_at"])
    body.pop("continue_url", None)
    await (ctx.last_write or conn.execute)("DELETE FROM carts WHERE id = $1", cart_id)
    return Outcome(200, body)


async def checkout_input(
    conn: asyncpg.Connection, ctx: CommerceContext, data: dict[str, Any]
) -> tuple[str | None, dict[str, Any] | None]:
    """For create-checkout with ``cart_id`` (UCP cart "Cart-to-Checkout Conversion"): ``(id of the
    cart's open checkout to return, None)``, or ``(None, the create body)`` with the cart's line
    items, context, buyer and discount codes in place of any the request sent (overlapping
    checkout fields are ignored; codes carry forward), the request's other fields kept; ``(None,
    None)`` when the cart is unknown. The cart row is locked, so concurrent creates of one cart
    make one checkout; the link (migration 0066) is written by :func:`link_checkout`."""
    cart_id = data.get("cart_id")
    if not isinstance(cart_id, str) or not cart_id or len(cart_id) > 200:
        raise InvalidRequest("$.cart_id must be a non-empty string")
    row = await _row(conn, ctx, cart_id, lock=True)
    if row is None:
        return None, None
    linked = await conn.fetchrow(
        "SELECT c.id, c.status, c.expires_at, c.caller FROM cart_checkouts l"
        " JOIN checkout_sessions c ON c.company_id = l.company_id AND c.id = l.checkout_id WHERE l.cart_id = $1",
        cart_id,
    )
    if (
        linked is not None and linked["status"] not in TERMINAL and linked["expires_at"] > ctx.now
        and linked["caller"] == ctx.caller
    ):  # fmt: skip
        return linked["id"], None
    body = {k: v for k, v in data.items() if k not in ("cart_id", *_CART_KEYS)}
    body.update({k: v for k, v in row["state"].items() if k in _CART_KEYS})
    return None, body


async def link_checkout(conn: asyncpg.Connection, ctx: CommerceContext, cart_id: str, checkout_id: str) -> None:
    """Record ``checkout_id`` as the open checkout of ``cart_id`` (replacing a finished one)."""
    await conn.execute(
        "INSERT INTO cart_checkouts (company_id, cart_id, checkout_id) VALUES ($1, $2, $3)"
        " ON CONFLICT (company_id, cart_id) DO UPDATE SET checkout_id = EXCLUDED.checkout_id",
        ctx.company_id, cart_id, checkout_id,
    )  # fmt: skip


async def create_checkout(conn: asyncpg.Connection, ctx: CommerceContext, data: Any) -> Outcome:
    """``POST /checkout-sessions`` / ``create_checkout``: with ``cart_id`` (UCP cart "Cart-to-Checkout
    Conversion"), the cart's open checkout (answered as by get, 200), or a checkout made of the
    cart's contents and linked to it; an unknown cart is 200 ``not_found``. Without, :func:`.service.create`."""
    cart_id = data.get("cart_id") if isinstance(data, dict) else None
    if cart_id is None:
        return await service.create(conn, ctx, data)
    open_id, body = await checkout_input(conn, ctx, from_wire("checkout.request", data, ctx.version))
    if open_id is not None:
        return await service.get(conn, ctx, open_id)
    if body is None:
        return _not_found(ctx)

    async def link(checkout_id: str) -> None:
        await link_checkout(conn, ctx, cart_id, checkout_id)

    return await service.create(conn, ctx, body, neutral=True, before_write=link)

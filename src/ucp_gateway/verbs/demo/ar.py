"""Accounts-receivable verbs: orders.explain_total (explain), payments.preview_refund_impact
(preview) and payments.refund (receipt, WRITE_FINANCIAL, typed phrase, no revert handler).

``orders.explain_total`` explains both the back-office orders (``sales_orders``, priced again from
the catalogue) and the orders buyer agents placed over UCP (the commerce ``orders`` tables, from the
snapshot frozen at completion): staff ask about either by id."""

from __future__ import annotations

from typing import Any

from ..context import VerbContext
from ..errors import VerbError
from ..policy import RiskClass, VerbPolicy, format_money
from ..registry import Registry
from .common import ID, obj, one
from .pricing import price_order

__all__ = ["explain_ucp_order", "provide", "refund_phrase"]

_ORDER = "SELECT * FROM sales_orders WHERE id = $1"


async def order_breakdown(conn, order_id: str):
    """Load an order and price it. Returns ``(order_row, Breakdown)``; raises not_found."""
    o = await one(conn, _ORDER, order_id, what="order", path="$.order_id")
    lines = await conn.fetch(
        "SELECT product_id, quantity, unit_price FROM sales_order_lines WHERE order_id = $1 ORDER BY line_no",
        order_id,
    )
    disc = await conn.fetchrow("SELECT code, type, value FROM discounts WHERE code = $1", o["discount_code"])
    rate = await conn.fetchrow("SELECT id, title, price FROM shipping_rates WHERE id = $1", o["shipping_rate_id"])
    promos = await conn.fetch("SELECT id, type, min_subtotal, eligible_item_ids FROM promotions ORDER BY id")
    return o, price_order(
        [dict(x) for x in lines],
        dict(disc) if disc else None,
        dict(rate) if rate else None,
        [dict(p) for p in promos],
    )


_TOTAL_ACTIONS = {"subtotal": "subtotal", "discount": "discount_applied", "fulfillment": "shipping", "tax": "tax"}


def explain_ucp_order(
    snapshot: dict[str, Any], discounts: list[dict[str, Any]], payments: list[Any], adjustments: list[Any]
) -> dict[str, Any]:
    """The explain output for an order placed over UCP, from its frozen snapshot (line items with
    their totals, the order totals: UCP order.md), the checkout's applied discounts (``{code?, title,
    amount}``, amounts positive), captured payments and completed adjustments (rows with
    ``occurred_at``/``created_at``, ``amount``/``detail``). Money in minor units. Pure."""
    cur = snapshot["currency"]
    chain: list[dict[str, Any]] = []
    for li in snapshot["line_items"]:
        amount = next((t["amount"] for t in li.get("totals") or [] if t["type"] == "subtotal"), None)
        item = li["item"]
        chain.append(
            {
                "action": "line_item",
                "detail": {
                    "item_id": item.get("id"),
                    "title": item.get("title"),
                    "quantity": li["quantity"],
                    "unit_price": item.get("price"),
                    "amount": amount,
                },
            }
        )
    totals = {t["type"]: t["amount"] for t in snapshot["totals"]}
    parts = []
    for kind, action in _TOTAL_ACTIONS.items():
        if kind not in totals:
            continue
        step: dict[str, Any] = {"action": action, "detail": {"amount": totals[kind]}}
        if kind == "discount":
            step["detail"]["discounts"] = discounts
        chain.append(step)
        amt = format_money(abs(totals[kind]), cur)
        if kind == "subtotal":
            parts.append(f"subtotal {amt}")
        elif kind == "discount":
            names = ", ".join(d.get("code") or d.get("title") or "?" for d in discounts) or "discounts"
            parts.append(f"minus {amt} for {names}")
        elif kind == "fulfillment":
            parts.append(f"plus fulfillment {amt}")
        else:
            parts.append(f"plus tax {amt}")
    total = totals.get("total", 0)
    chain.append({"action": "total", "detail": {"amount": total}})
    paid = 0
    for p in payments:
        paid += int(p["amount"])
        chain.append(
            {
                "action": "payment_captured",
                "timestamp": p["created_at"].isoformat(),
                "detail": {"amount": p["amount"], "handler_id": p["handler_id"]},
            }
        )
    for a in adjustments:
        chain.append(
            {"action": f"adjustment_{a['type']}", "timestamp": a["occurred_at"].isoformat(), "detail": a["detail"]}
        )
    return {
        "entity_id": snapshot["id"],
        "entity_type": "order",
        "causal_chain": chain,
        "current_state": {"total": total, "paid": paid, "currency": cur},
        "reasoning": f"Total {format_money(total, cur)} = " + ", ".join(parts) + ".",
    }


async def _explain_ucp_order(ctx: VerbContext, order_id: str) -> dict[str, Any] | None:
    """:func:`explain_ucp_order` for a UCP order of the company (commerce's ``orders`` tables), or
    None when there is none by that id."""
    conn = ctx.conn
    o = await conn.fetchrow("SELECT id, checkout_id, snapshot FROM orders WHERE id = $1", order_id)
    if o is None:
        return None
    body = await conn.fetchval("SELECT body::jsonb -> 'discounts' -> 'applied' FROM checkout_sessions WHERE id = $1",
                               o["checkout_id"])  # fmt: skip
    pays = await conn.fetch(
        "SELECT amount, handler_id, created_at FROM payments WHERE order_id = $1 AND status = 'captured'"
        " ORDER BY created_at",
        order_id,
    )
    adjs = await conn.fetch(
        "SELECT type, occurred_at, detail FROM order_adjustments WHERE order_id = $1 AND status = 'completed'"
        " ORDER BY seq",
        order_id,
    )
    applied = [
        {k: d.get(k) for k in ("code", "title", "amount") if k in d}
        for d in (body if isinstance(body, list) else [])
        if isinstance(d, dict)
    ]
    ctx.set_entity("order", order_id)
    return explain_ucp_order(o["snapshot"], applied, list(pays), list(adjs))


async def _explain_total(ctx: VerbContext) -> dict[str, Any]:
    if not await ctx.conn.fetchval("SELECT true FROM sales_orders WHERE id = $1", ctx.args["order_id"]):
        ucp = await _explain_ucp_order(ctx, ctx.args["order_id"])
        if ucp is not None:
            return ucp
    o, b = await order_breakdown(ctx.conn, ctx.args["order_id"])
    chain = [dict(s) for s in b.steps]
    chain.append(
        {
            "action": "payment_captured",
            "timestamp": o["created_at"].isoformat(),
            "detail": {"amount": o["paid_amount"]},
        }
    )
    for rf in await ctx.conn.fetch(
        "SELECT id, amount, created_at, reason FROM refunds WHERE order_id = $1 ORDER BY created_at", o["id"]
    ):
        chain.append(
            {
                "action": "refund_issued",
                "timestamp": rf["created_at"].isoformat(),
                "detail": {"refund_id": rf["id"], "amount": -rf["amount"], "reason": rf["reason"]},
            }
        )
    cur = o["currency"]
    parts = [f"subtotal {format_money(b.subtotal, cur)}"]
    if b.discount:
        parts.append(f"minus {format_money(b.discount, cur)} for code {b.discount_code}")
    parts.append(
        f"plus shipping {format_money(b.shipping, cur)}"
        + (f" (free via {b.free_shipping_promo})" if b.free_shipping_promo else "")
    )
    ctx.set_entity("order", o["id"])
    return {
        "entity_id": o["id"],
        "entity_type": "order",
        "causal_chain": chain,
        "current_state": {
            "status": o["status"],
            "total": b.total,
            "paid": o["paid_amount"],
            "refunded": o["refunded_amount"],
            "currency": cur,
        },
        "reasoning": f"Total {format_money(b.total, cur)} = " + ", ".join(parts) + ".",
    }


def _refundable(o) -> int:
    return int(o["paid_amount"]) - int(o["refunded_amount"])


async def _preview_refund(ctx: VerbContext) -> dict[str, Any]:
    o = await one(ctx.conn, _ORDER, ctx.args["order_id"], what="order", path="$.order_id")
    left = _refundable(o)
    amount = int(ctx.args.get("amount", left))
    if amount > left or amount <= 0:
        raise VerbError("invalid_state", f"refundable amount is {left}", path="$.amount")
    after = int(o["refunded_amount"]) + amount
    status = "refunded" if after == o["paid_amount"] else "partially_refunded"
    ctx.set_entity("order", o["id"])
    return {
        "current": {"status": o["status"], "paid": o["paid_amount"], "refunded": o["refunded_amount"]},
        "projected": {"status": status, "paid": o["paid_amount"], "refunded": after},
        "delta": {"net_change": -amount, "refundable_after": left - amount, "currency": o["currency"]},
        "reversible": False,
        "notes": "A refund returns money to the buyer and cannot be undone.",
    }


def refund_phrase(args) -> str:
    """``REFUND $12.50 on order #ord_42`` (digest §5.3 phrase style)."""
    return f"REFUND {format_money(int(args['amount']), args['currency'])} on order #{args['order_id']}"


async def _refund(ctx: VerbContext) -> dict[str, Any]:
    a = ctx.args
    o = await one(ctx.conn, _ORDER + " FOR UPDATE", a["order_id"], what="order", path="$.order_id")
    if o["currency"] != a["currency"]:
        raise VerbError("invalid_arguments", f"order currency is {o['currency']}", path="$.currency")
    if a["amount"] > _refundable(o):
        raise VerbError("invalid_state", f"refundable amount is {_refundable(o)}", path="$.amount")
    n = await ctx.conn.fetchval("SELECT count(*) FROM refunds WHERE order_id = $1", o["id"])
    rid = f"rf_{o['id']}_{n + 1}"
    after = int(o["refunded_amount"]) + a["amount"]
    status = "refunded" if after == o["paid_amount"] else "partially_refunded"
    await ctx.conn.execute(
        "INSERT INTO refunds (company_id, id, order_id, amount, currency, reason, created_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7)",
        ctx.company.id,
        rid,
        o["id"],
        a["amount"],
        a["currency"],
        a.get("reason", ""),
        ctx.now,
    )
    await ctx.conn.execute(
        "UPDATE sales_orders SET refunded_amount = $2, status = $3 WHERE id = $1", o["id"], after, status
    )
    ctx.set_entity("order", o["id"])
    await ctx.emit("payment.refunded", "order", o["id"], {"refund_id": rid, "amount": a["amount"]})
    return {
        "outcome": "refunded",
        "refund_id": rid,
        "order_id": o["id"],
        "amount": a["amount"],
        "currency": a["currency"],
        "order_status": status,
    }


def provide(registry: Registry) -> None:
    r = registry.register
    r(
        {
            "name": "orders.explain_total",
            "shape": "explain",
            "description": "Explain how an order's total came about: line items, subtotal, discount code, shipping "
            "and free-shipping promotions, payment and refunds, in order.",
            "input_schema": obj(["order_id"], order_id=ID),
        },
        VerbPolicy(RiskClass.READ, subagent="ar"),
        _explain_total,
    )
    r(
        {
            "name": "payments.preview_refund_impact",
            "shape": "preview",
            "description": "Project the impact of refunding an order WITHOUT executing it: status change, net change "
            "and what stays refundable. amount defaults to everything refundable.",
            "input_schema": obj(["order_id"], order_id=ID, amount={"type": "integer", "minimum": 1}),
        },
        VerbPolicy(RiskClass.READ, subagent="ar"),
        _preview_refund,
    )
    r(
        {
            "name": "payments.refund",
            "shape": "receipt",
            "side_effects": "write",
            "description": "Refund part or all of an order's payment (amount in minor units, currency must match the "
            "order). Financial: needs an admin and the typed phrase. Cannot be reverted.",
            "input_schema": obj(
                ["order_id", "amount", "currency"],
                order_id=ID,
                amount={"type": "integer", "minimum": 1},
                currency={"type": "string", "pattern": "^[A-Z]{3}$"},
                reason={"type": "string", "maxLength": 200},
            ),
            "surfaces": ["http", "mcp_stdio", "webmcp", "cli"],
        },
        VerbPolicy(RiskClass.WRITE_FINANCIAL, subagent="ar", phrase=refund_phrase),
        _refund,
    )

"""Accounts-payable / stock verbs: ap.suggest_restock (suggest) and inventory_adjust (receipt,
WRITE_REVERSIBLE; revert applies the opposite delta). Commissions: commissions.preview_payout (preview)."""

from __future__ import annotations

from typing import Any

from ..context import RevertContext, VerbContext
from ..errors import VerbError
from ..policy import RiskClass, VerbPolicy
from ..registry import Registry
from .common import ID, band, obj, one

__all__ = ["provide"]


async def _suggest_restock(ctx: VerbContext) -> dict[str, Any]:
    threshold = int(ctx.args.get("threshold", 100))
    rows = await ctx.conn.fetch(
        "SELECT i.product_id, i.quantity, p.title, coalesce(sum(l.quantity), 0) AS sold, count(l.*) AS lines "
        "FROM inventory i JOIN products p ON p.id = i.product_id "
        "LEFT JOIN sales_order_lines l ON l.product_id = i.product_id "
        "WHERE i.quantity < $1 GROUP BY i.product_id, i.quantity, p.title",
        threshold,
    )
    out = []
    for r in rows:
        conf = round(min(0.95, 0.5 + 0.45 * (1 - r["quantity"] / threshold) + 0.05 * min(int(r["sold"]), 5) / 5), 3)
        qty = max(threshold * 2 - r["quantity"], 1)
        out.append(
            {
                "action": "inventory_adjust",
                "confidence": conf,
                "confidence_band": band(conf, int(r["lines"])),
                "reason": f"{r['title']}: {r['quantity']} in stock, below {threshold}; {r['sold']} sold",
                "sample_size": int(r["lines"]),
                "model_version": "rules-v1",
                "args": {"product_id": r["product_id"], "delta": qty, "reason": "restock"},
            }
        )
    out.sort(key=lambda s: (-s["confidence"], s["args"]["product_id"]))
    return {"suggestions": out}


async def _apply(conn, product_id: str, delta: int) -> tuple[int, int]:
    row = await one(
        conn,
        "SELECT quantity FROM inventory WHERE product_id = $1 FOR UPDATE",
        product_id,
        what="product",
        path="$.product_id",
    )
    new = row["quantity"] + delta
    if new < 0:
        raise VerbError("invalid_state", f"only {row['quantity']} in stock", path="$.delta")
    await conn.execute("UPDATE inventory SET quantity = $2 WHERE product_id = $1", product_id, new)
    return row["quantity"], new


async def _adjust(ctx: VerbContext) -> dict[str, Any]:
    pid, delta = ctx.args["product_id"], ctx.args["delta"]
    before, after = await _apply(ctx.conn, pid, delta)
    ctx.set_revert(f"inventory:{pid}:{-delta:+d}", {"product_id": pid, "delta": delta})
    ctx.set_entity("product", pid)
    await ctx.emit("inventory.adjusted", "product", pid, {"delta": delta, "quantity": after})
    return {"outcome": "adjusted", "product_id": pid, "previous_quantity": before, "quantity": after}


async def _adjust_revert(r: RevertContext) -> dict[str, Any]:
    d = r.entry["revert_data"]
    _, after = await _apply(r.conn, d["product_id"], -int(d["delta"]))
    return {"revert_action": f"applied {-int(d['delta']):+d} to {d['product_id']} (now {after})"}


async def _preview_payout(ctx: VerbContext) -> dict[str, Any]:
    bps = int(ctx.args.get("rate_bps", 500))
    row = await ctx.conn.fetchrow(
        "SELECT count(*) AS n, coalesce(sum(paid_amount - refunded_amount), 0) AS net FROM sales_orders"
    )
    payout = (int(row["net"]) * bps + 5000) // 10000
    return {
        "current": {"commission_owed": 0, "orders": row["n"], "net_sales": int(row["net"])},
        "projected": {"commission_owed": payout},
        "delta": {"payout": payout, "rate_bps": bps, "currency": "USD"},
        "reversible": True,
        "notes": "Commission is rate_bps/10000 of net sales (paid minus refunded), rounded half up to the minor unit.",
    }


def provide(registry: Registry) -> None:
    r = registry.register
    r(
        {
            "name": "ap.suggest_restock",
            "shape": "suggest",
            "description": "Ranked restock suggestions for products below a stock threshold (default 100), with the "
            "inventory_adjust arguments to apply.",
            "input_schema": obj([], threshold={"type": "integer", "minimum": 1, "maximum": 100000}),
        },
        VerbPolicy(RiskClass.READ, subagent="ap"),
        _suggest_restock,
    )
    r(
        {
            "name": "inventory_adjust",
            "shape": "receipt",
            "side_effects": "write",
            "description": "Add (restock) or remove stock for a product. Reversible: audit.revert applies the opposite "
            "delta.",
            "input_schema": obj(
                ["product_id", "delta"],
                product_id=ID,
                delta={"type": "integer", "minimum": -100000, "maximum": 100000, "not": {"const": 0}},
                reason={"type": "string", "maxLength": 200},
            ),
        },
        VerbPolicy(RiskClass.WRITE_REVERSIBLE, subagent="ap", revert=_adjust_revert),
        _adjust,
    )
    r(
        {
            "name": "commissions.preview_payout",
            "shape": "preview",
            "description": "Preview the sales commission payout at a rate in basis points (default 500 = 5%) over net "
            "sales, without paying anything.",
            "input_schema": obj([], rate_bps={"type": "integer", "minimum": 0, "maximum": 10000}),
        },
        VerbPolicy(RiskClass.READ, subagent="commissions"),
        _preview_payout,
    )
    _ = ID

"""The order resource (UCP order.md, S:shopping/order.json), pure.

An order is a snapshot taken from the completed checkout (line items, expectations, totals, currency,
attribution) plus the append-only fulfillment events and adjustments. Line ``quantity.fulfilled`` is
the quantity in ``shipped`` events; ``status`` is derived: removed / fulfilled / partial / processing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .checkout import rfc3339

__all__ = ["order_from_rows", "order_snapshot", "render_order", "shipped_event"]


def order_snapshot(checkout: dict[str, Any], *, order_id: str, label: str, permalink_url: str) -> dict[str, Any]:
    """Freeze what the order keeps from the completed ``checkout`` body."""
    expectations = []
    for i, m in enumerate((checkout.get("fulfillment") or {}).get("methods") or []):
        dest = next((d for d in m.get("destinations") or [] if d.get("id") == m.get("selected_destination_id")), {})
        if m.get("type") == "pickup":
            dest = dict(dest.get("address") or {})
        dest = {k: v for k, v in dest.items() if k != "id"}
        group = (m.get("groups") or [{}])[0]
        option = next((o for o in group.get("options") or [] if o["id"] == group.get("selected_option_id")), None)
        qty = {li["id"]: li["quantity"] for li in checkout["line_items"]}
        exp: dict[str, Any] = {
            "id": f"exp_{i + 1}",
            "line_items": [{"id": x, "quantity": qty[x]} for x in m.get("line_item_ids") or [] if x in qty],
            "method_type": m["type"],
            "destination": dest,
            "fulfillable_on": "now",
        }
        if option:
            exp["description"] = option["title"]
        expectations.append(exp)
    snap: dict[str, Any] = {
        "id": order_id,
        "label": label,
        "checkout_id": checkout["id"],
        "permalink_url": permalink_url,
        "line_items": [
            {"id": li["id"], "item": li["item"], "quantity": li["quantity"], "totals": li["totals"]}
            for li in checkout["line_items"]
        ],
        "expectations": expectations,
        "currency": checkout["currency"],
        "totals": checkout["totals"],
    }
    if checkout.get("attribution") is not None:
        snap["attribution"] = checkout["attribution"]
    return snap


def _line_status(total: int, fulfilled: int) -> str:
    if total == 0:
        return "removed"
    if fulfilled >= total:
        return "fulfilled"
    return "partial" if fulfilled > 0 else "processing"


def render_order(
    snapshot: dict[str, Any],
    events: list[dict[str, Any]],
    adjustments: list[dict[str, Any]],
    ucp: dict[str, Any],
) -> dict[str, Any]:
    """The full order entity (the same shape on GET and in every webhook).

    ``events``/``adjustments`` are wire dicts in occurrence order.
    """
    shipped: dict[str, int] = {}
    for ev in events:
        if ev["type"] == "shipped":
            for li in ev.get("line_items") or []:
                shipped[li["id"]] = shipped.get(li["id"], 0) + li["quantity"]
    removed: dict[str, int] = {}
    for adj in adjustments:
        if adj["type"] in ("cancellation", "return") and adj["status"] == "completed":
            for li in adj.get("line_items") or []:
                removed[li["id"]] = removed.get(li["id"], 0) + abs(li["quantity"])
    lines = []
    for li in snapshot["line_items"]:
        original = li["quantity"]
        total = max(0, original - removed.get(li["id"], 0))
        fulfilled = min(total, shipped.get(li["id"], 0))
        lines.append(
            {
                "id": li["id"],
                "item": li["item"],
                "quantity": {"original": original, "total": total, "fulfilled": fulfilled},
                "totals": li["totals"],
                "status": _line_status(total, fulfilled),
            }
        )
    body: dict[str, Any] = {
        "ucp": ucp,
        "id": snapshot["id"],
        "label": snapshot["label"],
        "checkout_id": snapshot["checkout_id"],
        "permalink_url": snapshot["permalink_url"],
        "line_items": lines,
        "fulfillment": {"expectations": snapshot["expectations"], "events": events},
        "adjustments": adjustments,
        "currency": snapshot["currency"],
        "totals": snapshot["totals"],
    }
    if "attribution" in snapshot:
        body["attribution"] = snapshot["attribution"]
    return body


def shipped_event(
    snapshot: dict[str, Any], *, event_id: str, now: datetime, carrier: str = "Demo Post"
) -> dict[str, Any]:
    """A ``shipped`` fulfillment event covering every line item of the order (simulation)."""
    return {
        "id": event_id,
        "occurred_at": rfc3339(now),
        "type": "shipped",
        "line_items": [{"id": li["id"], "quantity": li["quantity"]} for li in snapshot["line_items"]],
        "tracking_number": f"TRK{event_id[-10:].upper()}",
        "carrier": carrier,
        "description": "Handed to the carrier.",
    }


def _event_wire(r) -> dict[str, Any]:
    return {"id": r["id"], "type": r["type"], "occurred_at": rfc3339(r["occurred_at"]), **r["detail"]}


def _adjustment_wire(r) -> dict[str, Any]:
    return {"id": r["id"], "type": r["type"], "status": r["status"], "occurred_at": rfc3339(r["occurred_at"]),
            **r["detail"]}  # fmt: skip


def order_from_rows(order, events, adjustments, ucp: dict[str, Any]) -> dict[str, Any]:
    """The order body (:func:`render_order`) of an ``orders`` row with its ``order_events`` and
    ``order_adjustments`` rows (``repo.get_order_rows``), enveloped in ``ucp``."""
    return render_order(
        order["snapshot"], [_event_wire(e) for e in events], [_adjustment_wire(a) for a in adjustments], ucp
    )

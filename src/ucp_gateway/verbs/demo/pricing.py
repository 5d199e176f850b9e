"""Back-office order pricing (pure): lines -> subtotal -> discount -> shipping -> total.

Money is integer minor units throughout. Discounts: ``percentage`` (value = percent, rounded half
up to the minor unit) or ``fixed_amount`` (capped at the subtotal). Shipping is free when a
``free_shipping`` promotion applies (minimum subtotal before discount, or an eligible item in the cart).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Breakdown", "price_order"]


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Every step of a total, in order, for ``orders.explain_total``."""

    subtotal: int
    discount: int
    discount_code: str | None
    shipping: int
    shipping_title: str | None
    free_shipping_promo: str | None
    total: int
    steps: tuple[dict[str, Any], ...]


def price_order(
    lines: Sequence[Mapping[str, Any]],
    discount: Mapping[str, Any] | None,
    rate: Mapping[str, Any] | None,
    promotions: Sequence[Mapping[str, Any]],
) -> Breakdown:
    """Price one order.

    Args:
        lines: ``{product_id, quantity, unit_price}``; discount: ``{code, type, value}`` or None;
        rate: ``{id, title, price}`` or None; promotions: ``{id, type, min_subtotal, eligible_item_ids}``.
    Returns: a :class:`Breakdown` whose ``steps`` are the causal chain of the total.
    """
    steps: list[dict[str, Any]] = []
    subtotal = 0
    for ln in lines:
        amount = int(ln["quantity"]) * int(ln["unit_price"])
        subtotal += amount
        steps.append(
            {
                "action": "line_item",
                "detail": {
                    "product_id": ln["product_id"],
                    "quantity": ln["quantity"],
                    "unit_price": ln["unit_price"],
                    "amount": amount,
                },
            }
        )
    steps.append({"action": "subtotal", "detail": {"amount": subtotal}})
    disc = 0
    if discount:
        if discount["type"] == "percentage":
            disc = (subtotal * int(discount["value"]) + 50) // 100
        else:
            disc = min(int(discount["value"]), subtotal)
        steps.append(
            {
                "action": "discount_applied",
                "detail": {
                    "code": discount["code"],
                    "type": discount["type"],
                    "value": discount["value"],
                    "amount": -disc,
                },
            }
        )
    ship, promo_id = (int(rate["price"]) if rate else 0), None
    items = {ln["product_id"] for ln in lines}
    for p in promotions:
        if p["type"] != "free_shipping":
            continue
        by_min = p.get("min_subtotal") is not None and subtotal >= int(p["min_subtotal"])
        by_item = bool(set(p.get("eligible_item_ids") or []) & items)
        if by_min or by_item:
            promo_id = p["id"]
            break
    if rate:
        steps.append({"action": "shipping", "detail": {"rate_id": rate["id"], "title": rate["title"], "amount": ship}})
    if promo_id and ship:
        steps.append({"action": "free_shipping_promotion", "detail": {"promotion_id": promo_id, "amount": -ship}})
        ship = 0
    total = subtotal - disc + ship
    steps.append({"action": "total", "detail": {"amount": total}})
    return Breakdown(
        subtotal,
        disc,
        discount["code"] if discount else None,
        ship,
        rate["title"] if rate else None,
        promo_id,
        total,
        tuple(steps),
    )

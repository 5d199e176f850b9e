"""Totals in integer minor units (UCP checkout.md "Total", S:shopping/types/totals.json).

Invariants kept here: exactly one ``subtotal`` and one ``total``; ``discount``/``items_discount``
negative; ``fulfillment``/``tax``/``fee`` non-negative; ``total`` = sum of the other entries.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TotalsError", "check_totals", "checkout_totals", "line_totals"]


class TotalsError(ValueError):
    """A totals list breaks the contract (a bug in the caller, never user input)."""


def line_totals(unit_price: int, quantity: int) -> list[dict[str, Any]]:
    """Totals of one line item: ``subtotal`` = ``total`` = unit_price * quantity (minor units)."""
    amount = int(unit_price) * int(quantity)
    return [{"type": "subtotal", "amount": amount}, {"type": "total", "amount": amount}]


def checkout_totals(*, subtotal: int, discount: int = 0, fulfillment: int | None = None) -> list[dict[str, Any]]:
    """The checkout's ``totals[]`` in display order.

    Args:
        subtotal: sum of line subtotals (>= 0).
        discount: the applied discount amount as a positive number (rendered negative); 0 = no line.
        fulfillment: the selected options' cost (>= 0); None = no fulfillment line.
    Returns: ``[subtotal, discount?, fulfillment?, total]``; ``total`` never below 0.
    Raises: TotalsError on a negative input.
    """
    if subtotal < 0 or discount < 0 or (fulfillment is not None and fulfillment < 0):
        raise TotalsError("subtotal, discount and fulfillment are non-negative inputs")
    discount = min(discount, subtotal)  # a discount never makes the items negative
    out: list[dict[str, Any]] = [{"type": "subtotal", "amount": subtotal}]
    if discount:
        out.append({"type": "discount", "amount": -discount, "display_text": "Discount"})
    if fulfillment is not None:
        out.append({"type": "fulfillment", "amount": fulfillment, "display_text": "Shipping"})
    out.append({"type": "total", "amount": subtotal - discount + (fulfillment or 0)})
    check_totals(out)
    return out


_SIGN = {"subtotal": 1, "fulfillment": 1, "tax": 1, "fee": 1, "discount": -1, "items_discount": -1}


def check_totals(totals: list[dict[str, Any]]) -> None:
    """Raise :class:`TotalsError` unless ``totals`` meets the UCP totals contract."""
    kinds = [t["type"] for t in totals]
    if kinds.count("subtotal") != 1 or kinds.count("total") != 1:
        raise TotalsError("exactly one subtotal and one total are required")
    rest = 0
    for t in totals:
        amt = t["amount"]
        if not isinstance(amt, int) or isinstance(amt, bool):
            raise TotalsError("amounts are integers (minor units)")
        sign = _SIGN.get(t["type"])
        if (sign == 1 and amt < 0) or (sign == -1 and amt >= 0):
            raise TotalsError(f"{t['type']} has the wrong sign")
        if t["type"] not in _SIGN and t["type"] != "total" and not t.get("display_text"):
            raise TotalsError(f"unknown total type {t['type']} needs display_text")
        if t.get("lines") and sum(x["amount"] for x in t["lines"]) != amt:
            raise TotalsError(f"lines of {t['type']} do not sum to its amount")
        if t["type"] != "total":
            rest += amt
    total = next(t["amount"] for t in totals if t["type"] == "total")
    if total != rest:
        raise TotalsError(f"total {total} != sum of entries {rest}")

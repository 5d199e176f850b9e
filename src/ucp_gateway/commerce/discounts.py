"""Discount extension (dev.ucp.shopping.discount, UCP discount.md), pure.

Codes are matched case-insensitively and each request's ``codes`` replaces the previous set (``[]``
clears). Discounts stack in order (automatic ones first, then codes in the order sent): a percentage
applies to what is left after the earlier ones. Each applied discount is split over the line items
in proportion to what is left of each line (largest remainder), so ``sum(allocations) == amount``.
Rejected codes become warnings with the standard codes and ``path`` ``$.discounts.codes[i]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalog import DiscountRule
from .messages import warning

__all__ = ["AutomaticDiscount", "DiscountResult", "allocate", "apply_discounts"]


@dataclass(frozen=True)
class AutomaticDiscount:
    """A merchant rule applied without a code (``automatic: true``; the platform cannot remove it)."""

    id: str
    title: str
    type: str  # "percentage" | "fixed_amount"
    value: int
    min_subtotal: int = 0


@dataclass(frozen=True)
class DiscountResult:
    codes: list[str]  # echoed back as sent
    applied: list[dict[str, Any]]
    amount: int  # total discount, positive minor units
    messages: list[dict[str, Any]]


def allocate(amount: int, weights: list[int]) -> list[int]:
    """Split ``amount`` over ``weights`` proportionally; parts sum to ``amount`` exactly.

    Largest-remainder method; ties go to the earlier index. All-zero weights -> all on index 0.
    """
    if not weights:
        return []
    total = sum(weights)
    if total <= 0:
        return [amount] + [0] * (len(weights) - 1)
    base = [amount * w // total for w in weights]
    rema = [(amount * w % total, -i) for i, w in enumerate(weights)]
    short = amount - sum(base)
    for _, neg_i in sorted(rema, reverse=True)[:short]:
        base[-neg_i] += 1
    return base


def _amount(kind: str, value: int, remaining: int) -> int:
    if kind == "percentage":
        return remaining - remaining * (100 - value) // 100
    return min(value, remaining)


def apply_discounts(
    codes: list[str] | None,
    line_subtotals: list[int],
    rules: dict[str, DiscountRule],
    *,
    currency: str,
    automatic: tuple[AutomaticDiscount, ...] = (),
) -> DiscountResult:
    """Apply automatic discounts and the submitted ``codes`` to the line items.

    Args:
        codes: ``discounts.codes`` from the request (None = not sent, treated as no codes).
        line_subtotals: each line item's subtotal in minor units, in ``line_items`` order.
        rules: known codes, keyed by upper-case code.
        currency: the checkout currency (a fixed-amount rule in another currency is rejected).
        automatic: merchant rules that apply without a code.
    Returns: :class:`DiscountResult`; ``applied[].amount`` positive, allocations to ``$.line_items[i]``.
    """
    remaining = list(line_subtotals)
    applied: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    subtotal = sum(line_subtotals)

    def _apply(kind: str, value: int, entry: dict[str, Any]) -> None:
        amt = _amount(kind, value, sum(remaining))
        if amt <= 0:
            return
        parts = allocate(amt, remaining)
        for i, p in enumerate(parts):
            remaining[i] -= p
        entry.update(
            amount=amt,
            method="across",
            priority=len(applied) + 1,
            allocations=[{"path": f"$.line_items[{i}]", "amount": p} for i, p in enumerate(parts) if p],
        )
        applied.append(entry)

    for rule in automatic:
        if subtotal >= rule.min_subtotal:
            _apply(rule.type, rule.value, {"title": rule.title, "automatic": True})

    seen: set[str] = set()
    for i, raw in enumerate(codes or []):
        path = f"$.discounts.codes[{i}]"
        code = raw.strip().upper()
        rule = rules.get(code)
        if code in seen:
            messages.append(warning("discount_code_already_applied", f"Code '{raw}' is already applied.", path=path))
            continue
        if rule is None or (rule.type == "fixed_amount" and rule.currency not in (None, currency)):
            messages.append(warning("discount_code_invalid", f"Code '{raw}' is not valid.", path=path))
            continue
        seen.add(code)
        before = len(applied)
        _apply(rule.type, rule.value, {"code": rule.code, "title": rule.description or rule.code})
        if len(applied) == before:
            messages.append(
                warning(
                    "discount_code_combination_disallowed",
                    f"Code '{raw}' has nothing left to discount.",
                    path=path,
                )
            )
    return DiscountResult(
        codes=list(codes or []),
        applied=applied,
        amount=sum(a["amount"] for a in applied),
        messages=messages,
    )

"""The checkout resource, recomputed from the platform's writable state (pure; UCP checkout.md).

``state`` is what the platform wrote (line items, buyer, context, fulfillment, discounts, payment
instruments without credentials, attribution); everything else (titles, prices, totals, options,
messages, status) is derived here from the catalogue: the server is the price authority.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .catalog import Catalog
from .discounts import AutomaticDiscount, apply_discounts
from .fulfillment import build_fulfillment
from .messages import error, warning
from .status import TERMINAL, status_for_messages
from .totals import checkout_totals, line_totals

__all__ = ["Priced", "ShopInfo", "price_checkout", "render_checkout", "rfc3339"]


def rfc3339(dt: datetime) -> str:
    """UTC RFC 3339 with ``Z`` and whole seconds: ``strftime("%Y-%m-%dT%H:%M:%SZ")`` of the UTC time,
    written by ``isoformat`` (several per response; strftime parses its format every call)."""
    u = dt.astimezone(UTC)
    if u.year < 1000:  # strftime does not zero-pad %Y; keep its spelling
        return u.strftime("%Y-%m-%dT%H:%M:%SZ")
    return u.replace(microsecond=0, tzinfo=None).isoformat() + "Z"


@dataclass(frozen=True)
class ShopInfo:
    """Per-company presentation facts: ``base_url`` is the https origin of the shop."""

    base_url: str
    ucp: dict[str, Any]  # the response ``ucp`` envelope (version, capabilities, payment_handlers)
    automatic_discounts: tuple[AutomaticDiscount, ...] = ()
    links: tuple[tuple[str, str], ...] = field(default=(("terms_of_service", "/terms"), ("privacy_policy", "/privacy")))


@dataclass(frozen=True)
class Priced:
    """Result of :func:`price_checkout`: the derived parts plus the purchasable quantities."""

    line_items: list[dict[str, Any]]
    totals: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    fulfillment: dict[str, Any] | None
    discounts: dict[str, Any] | None
    status: str  # incomplete | requires_escalation | ready_for_complete
    reservable: list[tuple[str, int]]  # (product_id, quantity) to reserve at complete
    nothing_purchasable: bool
    total: int


def price_checkout(state: dict[str, Any], catalog: Catalog, shop: ShopInfo) -> Priced:
    """Derive line items, totals, fulfillment, discounts, messages and status from ``state``.

    Unknown products and products in another currency -> ``item_unavailable``; stock below the
    quantity -> ``out_of_stock`` (both recoverable errors with a JSONPath). Amounts: minor units.
    """
    messages: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    pairs: list[tuple[str, str]] = []
    reservable: list[tuple[str, int]] = []
    used_ids: set[str] = {li["id"] for li in state.get("line_items", []) if li.get("id")}
    n = 0
    for i, li in enumerate(state.get("line_items", [])):
        pid, qty = li["item"]["id"], int(li["quantity"])
        p = catalog.products.get(pid)
        if p is None or p.currency != catalog.currency:
            messages.append(error("item_unavailable", f"Product '{pid}' not found.", path=f"$.line_items[{i}]"))
            continue
        lid = li.get("id")
        if not lid:
            n += 1
            while f"li_{n}" in used_ids:
                n += 1
            lid = f"li_{n}"
            used_ids.add(lid)
        if p.stock < qty:
            idx = len(lines)
            messages.append(
                error(
                    "out_of_stock",
                    f"Insufficient stock for '{p.title}': {p.stock} available.",
                    path=f"$.line_items[{idx}].quantity",
                )
            )
        else:
            reservable.append((pid, qty))
        item: dict[str, Any] = {"id": p.id, "title": p.title, "price": p.price}
        if p.image_url:
            item["image_url"] = p.image_url
        lines.append({"id": lid, "item": item, "quantity": qty, "totals": line_totals(p.price, qty)})
        pairs.append((lid, pid))
    subtotal = sum(li["totals"][0]["amount"] for li in lines)

    ctx_cur = (state.get("context") or {}).get("currency")
    if ctx_cur and ctx_cur.upper() != catalog.currency:
        messages.append(
            warning(
                "currency_unsupported",
                f"Prices are in {catalog.currency}; {ctx_cur} is not offered.",
                path="$.currency",
            )
        )

    disc_req = state.get("discounts")
    dres = apply_discounts(
        (disc_req or {}).get("codes"),
        [li["totals"][0]["amount"] for li in lines],
        catalog.discounts,
        currency=catalog.currency,
        automatic=shop.automatic_discounts,
    )
    messages.extend(dres.messages)
    discounts = None
    if disc_req is not None or dres.applied:
        discounts = {"codes": dres.codes, "applied": dres.applied}

    ful = build_fulfillment(state.get("fulfillment"), pairs, subtotal, catalog)
    messages.extend(ful.messages)
    totals = checkout_totals(subtotal=subtotal, discount=dres.amount, fulfillment=ful.cost)
    if not lines:
        messages.append(error("missing", "Add at least one available item.", path="$.line_items"))
    status = status_for_messages(messages)
    return Priced(
        line_items=lines,
        totals=totals,
        messages=messages,
        fulfillment=ful.fulfillment,
        discounts=discounts,
        status=status,
        reservable=reservable,
        nothing_purchasable=not reservable,
        total=totals[-1]["amount"],
    )


def _public_instrument(instr: dict[str, Any]) -> dict[str, Any]:
    # credentials are never echoed (payment_instrument.json: token is ucp_response "omit")
    return {k: v for k, v in instr.items() if k != "credential"}


def render_checkout(
    *,
    checkout_id: str,
    state: dict[str, Any],
    priced: Priced,
    status: str,
    currency: str,
    shop: ShopInfo,
    expires_at: datetime,
    order: dict[str, Any] | None = None,
    extra_messages: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The full checkout response body (S:shopping/checkout.json + fulfillment/discount/consent)."""
    body: dict[str, Any] = {
        "ucp": shop.ucp,
        "id": checkout_id,
        "line_items": priced.line_items,
        "status": status,
        "currency": currency,
        "totals": priced.totals,
        "messages": priced.messages + list(extra_messages or []),
        "links": [{"type": t, "url": shop.base_url + p} for t, p in shop.links],
        "expires_at": rfc3339(expires_at),
        "payment": {
            "instruments": [_public_instrument(i) for i in (state.get("payment") or {}).get("instruments") or []]
        },
    }
    for key in ("buyer", "context", "attribution"):
        if state.get(key) is not None:
            body[key] = state[key]
    if priced.fulfillment is not None:
        body["fulfillment"] = priced.fulfillment
    if priced.discounts is not None:
        body["discounts"] = priced.discounts
    if status not in TERMINAL:
        body["continue_url"] = f"{shop.base_url}/checkout-sessions/{checkout_id}"
    if order is not None:
        body["order"] = order
    return body

"""Fulfillment extension (dev.ucp.shopping.fulfillment, UCP fulfillment.md), pure.

One group per method covering all of its line items (we do not offer ``supports_multi_group``).
Shipping options come from the shipping rates: per service level the destination country's rate,
else the ``default`` one; option ``id`` = rate id. Free-shipping promotions make the standard option
cost 0 and say so in its title. A known customer's saved addresses are offered as destinations when
the platform sends none. Pickup uses the company's pickup locations (retail locations).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .catalog import Catalog, Promotion, ShippingRate
from .messages import error, info, warning

__all__ = [
    "FulfillmentResult",
    "available_methods",
    "build_fulfillment",
    "free_shipping_applies",
    "shipping_options",
]

_ADDRESS_KEYS = ("street_address", "address_locality", "address_region", "postal_code", "address_country")
_DESCRIPTIONS = {
    "standard": "Delivered in 3-5 business days.",
    "express": "Delivered in 1-2 business days.",
}


@dataclass(frozen=True)
class FulfillmentResult:
    fulfillment: dict[str, Any]
    cost: int | None  # sum of selected options, None when nothing is selected
    messages: list[dict[str, Any]]
    ready: bool  # every line item is covered by a method with a destination and an option selected


def free_shipping_applies(promo: Promotion, item_ids: list[str], items_subtotal: int) -> bool:
    """True when ``promo`` (type free_shipping) covers a group of ``item_ids`` worth ``items_subtotal``.

    A minimum-subtotal rule compares the checkout's item subtotal (minor units, before discounts);
    an item rule needs every item of the group to be eligible.
    """
    if promo.type != "free_shipping":
        return False
    if promo.min_subtotal is not None and items_subtotal >= promo.min_subtotal:
        return True
    return bool(promo.eligible_item_ids) and bool(item_ids) and all(i in promo.eligible_item_ids for i in item_ids)


def shipping_options(rates: tuple[ShippingRate, ...], country: str | None, *, free: bool) -> list[dict[str, Any]]:
    """Options for a destination ``country`` (ISO alpha-2): the country's rate per service level,
    else the ``default`` rate. ``free`` zeroes the standard option. Titles are distinct."""
    chosen: dict[str, ShippingRate] = {}
    for r in rates:
        if r.country_code == "default":
            chosen.setdefault(r.service_level, r)
    for r in rates:
        if country and r.country_code.upper() == country.upper():
            chosen[r.service_level] = r
    out: list[dict[str, Any]] = []
    titles: set[str] = set()
    for level, r in sorted(chosen.items(), key=lambda kv: (kv[1].price, kv[0])):
        price, title = r.price, r.title
        if free and level == "standard":
            price, title = 0, f"Free {r.title}"
        if title in titles:
            title = f"{title} ({level})"
        titles.add(title)
        opt: dict[str, Any] = {
            "id": r.id,
            "title": title,
            "totals": [{"type": "subtotal", "amount": price}, {"type": "total", "amount": price}],
        }
        if level in _DESCRIPTIONS:
            opt["description"] = _DESCRIPTIONS[level]
        out.append(opt)
    return out


def _dest_id(dest: dict[str, Any], catalog: Catalog) -> str:
    """Id for a destination sent without one: a saved address with the same content, else a stable
    content hash (deterministic checkout logic)."""
    want = tuple(str(dest.get(k) or "").strip().lower() for k in _ADDRESS_KEYS)
    for a in catalog.saved_addresses:
        if tuple(str(v).strip().lower() for v in (a.to_destination()[k] for k in _ADDRESS_KEYS)) == want:
            return a.id
    digest = hashlib.sha256(json.dumps(want).encode()).hexdigest()[:12]
    return f"dest_{digest}"


def available_methods(line_ids: list[str], catalog: Catalog) -> list[dict[str, Any]]:
    out = [
        {
            "type": "shipping",
            "line_item_ids": line_ids,
            "fulfillable_on": "now",
            "description": "Every item can be shipped to a postal address.",
        }
    ]
    if catalog.pickup_locations:
        out.append(
            {
                "type": "pickup",
                "line_item_ids": line_ids,
                "fulfillable_on": "now",
                "description": "Every item can be collected from one of our shops.",
            }
        )
    return out


def build_fulfillment(
    req: dict[str, Any] | None, lines: list[tuple[str, str]], items_subtotal: int, catalog: Catalog
) -> FulfillmentResult:
    """Recompute ``checkout.fulfillment`` from the platform's request.

    Args:
        req: the request's ``fulfillment`` (validated dict) or None.
        lines: ``(line_item_id, product_id)`` for each valid line item, in order.
        items_subtotal: sum of line subtotals, minor units (for minimum-subtotal promotions).
        catalog: rates, promotions, saved addresses, pickup locations.
    """
    line_ids = [lid for lid, _ in lines]
    product_of = dict(lines)
    messages: list[dict[str, Any]] = []
    methods_out: list[dict[str, Any]] = []
    covered: set[str] = set()
    cost = 0
    ready = True
    for mi, m in enumerate((req or {}).get("methods") or []):
        base = f"$.fulfillment.methods[{mi}]"
        mtype = m.get("type")
        mid = m.get("id") or f"method_{mi + 1}"
        m_lines = [x for x in (m.get("line_item_ids") or line_ids) if x in product_of] or line_ids
        for x in m.get("line_item_ids") or []:
            if x not in product_of:  # ignored (the method then covers the known ids, or every item)
                messages.append(
                    warning("invalid", f"Unknown line item id '{x}' ignored.", path=f"{base}.line_item_ids")
                )
        covered.update(m_lines)
        out: dict[str, Any] = {"id": mid, "type": mtype, "line_item_ids": m_lines}
        dests = [dict(d) for d in (m.get("destinations") or [])]
        if mtype == "shipping":
            for d in dests:
                if not d.get("id"):
                    d["id"] = _dest_id(d, catalog)
            if not dests:
                dests = [a.to_destination() for a in catalog.saved_addresses]
        elif not dests:
            dests = [{"id": p.id, "name": p.name, "address": p.address} for p in catalog.pickup_locations]
        if dests:
            out["destinations"] = dests
        by_id = {d["id"]: d for d in dests}
        sel = m.get("selected_destination_id")
        if sel and sel not in by_id:
            messages.append(error("invalid", f"Unknown destination '{sel}'.", path=f"{base}.selected_destination_id"))
            sel = None
        if sel:
            out["selected_destination_id"] = sel
        req_group = (m.get("groups") or [{}])[0]
        group: dict[str, Any] = {"id": req_group.get("id") or f"group_{mi + 1}", "line_item_ids": m_lines}
        options: list[dict[str, Any]] = []
        if sel and mtype == "shipping":
            items = [product_of[x] for x in m_lines]
            free = any(free_shipping_applies(p, items, items_subtotal) for p in catalog.promotions)
            options = shipping_options(catalog.rates, by_id[sel].get("address_country"), free=free)
            if free:
                messages.append(info("Free standard shipping applies to this order.", code="free_shipping"))
        elif sel and mtype == "pickup":
            options = [
                {
                    "id": "pickup",
                    "title": "In-store pickup",
                    "totals": [{"type": "subtotal", "amount": 0}, {"type": "total", "amount": 0}],
                }
            ]
        group["options"] = options
        opt_sel = req_group.get("selected_option_id")
        chosen = next((o for o in options if o["id"] == opt_sel), None)
        if opt_sel and options and chosen is None:
            messages.append(
                error(
                    "invalid",
                    f"Unknown fulfillment option '{opt_sel}'.",
                    path=f"{base}.groups[0].selected_option_id",
                )
            )
        if chosen:
            group["selected_option_id"] = chosen["id"]
            cost += next(t["amount"] for t in chosen["totals"] if t["type"] == "total")
        else:
            ready = False
        out["groups"] = [group]
        methods_out.append(out)
    if not methods_out:
        ready = False
    if line_ids and set(line_ids) - covered:
        messages.append(
            error(
                "missing",
                "Choose a fulfillment method, destination and option for every item.",
                path="$.fulfillment",
            )
        )
    elif not ready:
        messages.append(
            error("missing", "Select a destination and a fulfillment option.", path="$.fulfillment.methods")
        )
    result = {"methods": methods_out, "available_methods": available_methods(line_ids, catalog)}
    return FulfillmentResult(result, cost if methods_out and ready else None, messages, ready and bool(line_ids))

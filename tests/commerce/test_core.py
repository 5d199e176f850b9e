"""Pure core: status machine, totals, discounts, fulfillment, checkout pricing, request validation."""

from __future__ import annotations

import pytest

from ucp_gateway.commerce import status as st
from ucp_gateway.commerce.catalog import (
    Address,
    Catalog,
    DiscountRule,
    PickupLocation,
    Product,
    Promotion,
    ShippingRate,
)
from ucp_gateway.commerce.checkout import ShopInfo, price_checkout, render_checkout
from ucp_gateway.commerce.discounts import AutomaticDiscount, allocate, apply_discounts
from ucp_gateway.commerce.fulfillment import build_fulfillment, shipping_options
from ucp_gateway.commerce.totals import TotalsError, check_totals, checkout_totals
from ucp_gateway.commerce.validation import InvalidRequest, parse_complete, parse_state

from ..ucp_models import validate

RATES = (
    ShippingRate("std-ship", "default", "standard", 500, "Standard Shipping"),
    ShippingRate("exp-ship-us", "US", "express", 1500, "Express Shipping (US)"),
    ShippingRate("exp-ship-intl", "default", "express", 2500, "International Express"),
)
PROMOS = (
    Promotion("promo_1", "free_shipping", 10000, (), "Free Shipping on orders over $100"),
    Promotion("promo_2", "free_shipping", None, ("bouquet_roses",), "Free Shipping on Rose Bouquets"),
)
RULES = {
    "10OFF": DiscountRule("10OFF", "percentage", 10, "10% Off"),
    "WELCOME20": DiscountRule("WELCOME20", "percentage", 20, "20% Off"),
    "FIXED500": DiscountRule("FIXED500", "fixed_amount", 500, "$5.00 Off", "USD"),
}
CATALOG = Catalog(
    products={
        "bouquet_roses": Product("bouquet_roses", "Bouquet of Red Roses", 3500, stock=1000),
        "pot_ceramic": Product("pot_ceramic", "Ceramic Pot", 1500, stock=2000),
        "gardenias": Product("gardenias", "Gardenias", 2000, stock=0),
        "tulips": Product("tulips", "Spring Tulips", 3000, stock=10),
    },
    rates=RATES,
    promotions=PROMOS,
    discounts=RULES,
    pickup_locations=(PickupLocation("store_1", "Main Street Shop", {"street_address": "1 Main St"}),),
)
SHOP = ShopInfo(
    base_url="https://shop.example",
    ucp={"version": "2026-04-08", "status": "success", "capabilities": {}, "payment_handlers": {}},
)


# --- status machine ------------------------------------------------------------------------
def test_transition_table_terminal_states_are_closed():
    for event in st.TRANSITIONS:
        assert not st.can("completed", event)
        assert not st.can("canceled", event)
    with pytest.raises(st.InvalidTransition) as ei:
        st.transition("completed", "cancel")
    assert ei.value.http_status == 409


def test_happy_path_and_cancel():
    s = st.transition("incomplete", "recompute:ready_for_complete")
    s = st.transition(s, "complete_started")
    assert s == "complete_in_progress"
    assert st.transition(s, "complete_succeeded") == "completed"
    assert st.transition("incomplete", "cancel") == "canceled"
    assert st.transition("ready_for_complete", "expire") == "canceled"
    with pytest.raises(st.InvalidTransition):
        st.transition("incomplete", "complete_started")


def test_status_for_messages():
    assert st.status_for_messages([]) == "ready_for_complete"
    assert st.status_for_messages([{"type": "warning", "code": "x"}]) == "ready_for_complete"
    assert st.status_for_messages([{"type": "error", "severity": "recoverable"}]) == "incomplete"
    assert st.status_for_messages([{"type": "error", "severity": "requires_buyer_input"}]) == "requires_escalation"


# --- totals --------------------------------------------------------------------------------
def test_totals_contract():
    t = checkout_totals(subtotal=3500, discount=350, fulfillment=500)
    assert [x["type"] for x in t] == ["subtotal", "discount", "fulfillment", "total"]
    assert t[1]["amount"] == -350 and t[-1]["amount"] == 3650
    assert checkout_totals(subtotal=100, discount=500)[-1]["amount"] == 0  # never negative
    with pytest.raises(TotalsError):
        check_totals(
            [
                {"type": "subtotal", "amount": 1},
                {"type": "total", "amount": 1},
                {"type": "total", "amount": 1},
            ]
        )
    with pytest.raises(TotalsError):
        check_totals(
            [
                {"type": "subtotal", "amount": 5},
                {"type": "discount", "amount": 1},
                {"type": "total", "amount": 6},
            ]
        )
    with pytest.raises(TotalsError):
        check_totals([{"type": "subtotal", "amount": 5}, {"type": "total", "amount": 4}])


# --- discounts -----------------------------------------------------------------------------
@pytest.mark.parametrize("amount,weights", [(10, [1, 1, 1]), (350, [3500, 1500]), (7, [0, 0]), (1, [5, 5])])
def test_allocate_sums_exactly(amount, weights):
    parts = allocate(amount, weights)
    assert sum(parts) == amount and all(p >= 0 for p in parts)


def test_discount_codes_stack_case_insensitive_and_reject_with_warnings():
    r = apply_discounts(["10off", "Welcome20", "nope", "10OFF"], [3500], RULES, currency="USD")
    assert [a["code"] for a in r.applied] == ["10OFF", "WELCOME20"]
    assert 3500 - r.amount == int(int(3500 * 0.9) * 0.8)  # 2520
    assert [m["code"] for m in r.messages] == ["discount_code_invalid", "discount_code_already_applied"]
    assert [m["path"] for m in r.messages] == ["$.discounts.codes[2]", "$.discounts.codes[3]"]
    assert all(m["type"] == "warning" for m in r.messages)
    for a in r.applied:
        assert a["amount"] > 0 and sum(x["amount"] for x in a["allocations"]) == a["amount"]
    assert r.codes == ["10off", "Welcome20", "nope", "10OFF"]


def test_discount_clear_fixed_and_automatic():
    assert apply_discounts([], [3500], RULES, currency="USD").applied == []
    r = apply_discounts(["FIXED500"], [3500, 1500], RULES, currency="USD")
    assert r.amount == 500 and [x["amount"] for x in r.applied[0]["allocations"]] == [350, 150]
    assert apply_discounts(["FIXED500"], [3500], RULES, currency="EUR").applied == []
    auto = (AutomaticDiscount("spring", "Spring sale", "percentage", 5, min_subtotal=3000),)
    r = apply_discounts(None, [3500], RULES, currency="USD", automatic=auto)
    assert r.applied[0]["automatic"] is True and "code" not in r.applied[0] and r.amount == 175
    assert apply_discounts(None, [2000], RULES, currency="USD", automatic=auto).applied == []


# --- fulfillment ---------------------------------------------------------------------------
def test_shipping_options_by_country_distinct_titles_and_free():
    us = shipping_options(RATES, "US", free=False)
    assert [o["id"] for o in us] == ["std-ship", "exp-ship-us"]
    ca = shipping_options(RATES, "CA", free=False)
    assert [o["id"] for o in ca] == ["std-ship", "exp-ship-intl"]
    free = shipping_options(RATES, "US", free=True)
    assert free[0]["totals"][-1]["amount"] == 0 and "Free" in free[0]["title"]
    assert len({o["title"] for o in free}) == len(free)
    for o in us:
        assert o["title"] not in o.get("description", "")


def _method(**kw):
    return {"methods": [{"type": "shipping", **kw}]}


def test_fulfillment_group_per_method_and_selection():
    lines = [("li_1", "pot_ceramic"), ("li_2", "tulips")]
    req = _method(
        destinations=[{"id": "d1", "address_country": "US"}],
        selected_destination_id="d1",
        groups=[{"id": "g", "selected_option_id": "exp-ship-us"}],
    )
    r = build_fulfillment(req, lines, 4500, CATALOG)
    (m,) = r.fulfillment["methods"]
    assert len(m["groups"]) == 1 and m["groups"][0]["line_item_ids"] == ["li_1", "li_2"]
    assert r.ready and r.cost == 1500 and not [x for x in r.messages if x["type"] == "error"]
    r2 = build_fulfillment(_method(destinations=[{"id": "d1", "address_country": "US"}]), lines, 4500, CATALOG)
    assert not r2.ready and r2.cost is None and r2.fulfillment["methods"][0]["groups"][0]["options"] == []
    assert any(x["type"] == "error" for x in r2.messages)


def test_free_shipping_promotions():
    d = {"destinations": [{"id": "d", "address_country": "US"}], "selected_destination_id": "d"}
    roses = build_fulfillment(_method(**d), [("a", "bouquet_roses")], 3500, CATALOG)
    assert roses.fulfillment["methods"][0]["groups"][0]["options"][0]["totals"][-1]["amount"] == 0
    big = build_fulfillment(_method(**d), [("a", "pot_ceramic")], 10500, CATALOG)
    assert big.fulfillment["methods"][0]["groups"][0]["options"][0]["totals"][-1]["amount"] == 0
    small = build_fulfillment(_method(**d), [("a", "pot_ceramic")], 1500, CATALOG)
    assert small.fulfillment["methods"][0]["groups"][0]["options"][0]["totals"][-1]["amount"] == 500


def test_saved_addresses_offered_and_matched():
    saved = (
        Address("addr_1", "123 Main St", "Springfield", "IL", "62704", "US"),
        Address("addr_2", "456 Oak Ave", "Metropolis", "NY", "10012", "US"),
    )
    cat = Catalog(products=CATALOG.products, rates=RATES, saved_addresses=saved)
    r = build_fulfillment(_method(), [("a", "pot_ceramic")], 1500, cat)
    assert [d["id"] for d in r.fulfillment["methods"][0]["destinations"]] == ["addr_1", "addr_2"]
    same = {
        "street_address": "123 Main St",
        "address_locality": "Springfield",
        "address_region": "IL",
        "postal_code": "62704",
        "address_country": "US",
        "id": "",
    }
    r = build_fulfillment(_method(destinations=[same]), [("a", "pot_ceramic")], 1500, cat)
    assert r.fulfillment["methods"][0]["destinations"][0]["id"] == "addr_1"
    r = build_fulfillment(_method(), [("a", "pot_ceramic")], 1500, CATALOG)
    assert "destinations" not in r.fulfillment["methods"][0]


def test_pickup_method():
    req = {
        "methods": [
            {
                "type": "pickup",
                "selected_destination_id": "store_1",
                "groups": [{"selected_option_id": "pickup"}],
            }
        ]
    }
    r = build_fulfillment(req, [("a", "pot_ceramic")], 1500, CATALOG)
    assert r.ready and r.cost == 0
    assert {m["type"] for m in r.fulfillment["available_methods"]} == {"shipping", "pickup"}


# --- checkout ------------------------------------------------------------------------------
def _ready_state(**extra):
    return {
        "line_items": [
            {"item": {"id": "bouquet_roses"}, "quantity": 1},
            {"item": {"id": "pot_ceramic"}, "quantity": 2},
        ],
        "fulfillment": _method(
            destinations=[{"id": "d", "address_country": "CA"}],
            selected_destination_id="d",
            groups=[{"selected_option_id": "exp-ship-intl"}],
        ),
        **extra,
    }


def test_price_checkout_totals_consistent_and_valid_against_sdk():
    from datetime import UTC, datetime

    state = _ready_state(discounts={"codes": ["10off"]}, buyer={"email": "a@b.c", "consent": {"marketing": True}})
    p = price_checkout(state, CATALOG, SHOP)
    assert p.status == "ready_for_complete"
    assert [li["id"] for li in p.line_items] == ["li_1", "li_2"]
    sub = sum(li["totals"][-1]["amount"] for li in p.line_items)
    assert sub == 6500 and p.totals[0] == {"type": "subtotal", "amount": 6500}
    assert p.totals[1]["amount"] == -650 and p.total == 6500 - 650 + 2500
    body = render_checkout(
        checkout_id="chk_1",
        state=state,
        priced=p,
        status=p.status,
        currency="USD",
        shop=SHOP,
        expires_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    validate("checkout", body)
    assert body["continue_url"] == "https://shop.example/checkout-sessions/chk_1"
    assert body["buyer"]["consent"] == {"marketing": True}
    assert body["expires_at"] == "2026-01-01T00:00:00Z"


def test_unknown_and_out_of_stock_items_are_messages():
    p = price_checkout(
        {
            "line_items": [
                {"item": {"id": "nope"}, "quantity": 1},
                {"item": {"id": "gardenias"}, "quantity": 1},
            ]
        },
        CATALOG,
        SHOP,
    )
    codes = {m["code"]: m for m in p.messages if m["type"] == "error"}
    assert codes["item_unavailable"]["path"] == "$.line_items[0]"
    assert codes["out_of_stock"]["path"] == "$.line_items[0].quantity"
    assert p.nothing_purchasable and p.status == "incomplete"


def test_credentials_never_rendered():
    state = {
        "line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}],
        "payment": {"instruments": [{"id": "i", "handler_id": "h", "type": "card", "credential": {"token": "s"}}]},
    }
    p = price_checkout(state, CATALOG, SHOP)
    from datetime import UTC, datetime

    body = render_checkout(
        checkout_id="c",
        state=state,
        priced=p,
        status=p.status,
        currency="USD",
        shop=SHOP,
        expires_at=datetime.now(UTC),
    )
    assert "credential" not in str(body) and "'s'" not in str(body)


# --- validation ----------------------------------------------------------------------------
def test_parse_state_ignores_response_only_fields():
    data = {
        "id": "evil",
        "status": "completed",
        "currency": "EUR",
        "totals": [{"type": "total", "amount": 1}],
        "ucp": {"version": "x"},
        "links": [],
        "line_items": [
            {
                "id": "x1",
                "item": {"id": "pot_ceramic", "price": 1, "title": "cheap"},
                "quantity": 2,
                "totals": [],
            }
        ],
        "payment": {
            "instruments": [
                {
                    "id": "i",
                    "handler_id": "h",
                    "type": "card",
                    "credential": {"type": "token", "token": "secret"},
                }
            ]
        },
        "discounts": {"codes": ["A"], "applied": [{"title": "fake", "amount": 999}]},
    }
    s = parse_state(data, update=False)
    assert s["line_items"] == [{"id": "x1", "item": {"id": "pot_ceramic"}, "quantity": 2}]
    assert s["discounts"] == {"codes": ["A"]} and "secret" not in str(s)
    assert set(s) == {"line_items", "payment", "discounts"}


# regression: "3" and true were read as 3 and 1; 2.0 is an integer (JSON Schema), 2.5 is not
@pytest.mark.parametrize("qty", [0, -1, "two", "3", True, 2.5, 10**9 + 1, -1e300])
def test_bad_quantity_is_invalid_request(qty):
    with pytest.raises(InvalidRequest) as ei:
        parse_state({"line_items": [{"item": {"id": "a"}, "quantity": qty}]}, update=False)
    assert ei.value.http_status == 400 and "quantity" in ei.value.message
    assert "Unable to parse" not in ei.value.message  # pydantic's words for a float out of int range


def test_parse_complete():
    instr, token = parse_complete(
        {
            "payment": {
                "instruments": [
                    {
                        "id": "i",
                        "handler_id": "h",
                        "type": "card",
                        "credential": {"type": "token", "token": "tok"},
                    }
                ]
            }
        }
    )
    assert token == "tok" and "credential" not in instr
    with pytest.raises(InvalidRequest):
        parse_complete({"payment": {"instruments": []}})
    with pytest.raises(InvalidRequest):
        parse_complete({})


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"line_items": [{"item": {"id": "a"}, "quantity": 1}] * 101}, "$.line_items: at most 100 line items"),
        (
            {"line_items": [{"item": {"id": "a"}, "quantity": 1}], "discounts": {"codes": ["10OFF"] * 21}},
            "$.discounts.codes: at most 20 codes",
        ),
        (
            {"line_items": [{"item": {"id": "a"}, "quantity": 1}], "discounts": {"codes": ["ok", "x" * 65]}},
            "$.discounts.codes.1: at most 64 characters",
        ),
    ],
)
def test_unbounded_lists_are_invalid_request(data, says):
    """Regression (newcomer): 10,000 line items or discount codes were priced, stored and echoed back."""
    for update in (False, True):
        with pytest.raises(InvalidRequest) as ei:
            parse_state(data, update=update)
        assert ei.value.message == says


def test_bounds_are_inclusive():
    s = parse_state(
        {"line_items": [{"item": {"id": "a"}, "quantity": 1}] * 100, "discounts": {"codes": ["x" * 64] * 20}},
        update=False,
    )
    assert len(s["line_items"]) == 100 and len(s["discounts"]["codes"]) == 20


def test_line_item_ids_are_unique():
    """Regression (security review): two line items sent with id "L" were both kept as "L", so a
    fulfillment group's line_item_ids and a discount allocation could not say which one they meant."""
    items = [{"id": "L", "item": {"id": "a"}, "quantity": 1}, {"id": "L", "item": {"id": "b"}, "quantity": 1}]
    with pytest.raises(InvalidRequest) as ei:
        parse_state({"line_items": items}, update=True)
    assert ei.value.http_status == 400 and ei.value.message == "$.line_items.1.id: 'L' names an earlier line item too"
    items[1]["id"] = "M"
    assert [li["id"] for li in parse_state({"line_items": items}, update=True)["line_items"]] == ["L", "M"]

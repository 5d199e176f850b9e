"""Each demo verb on the flower-shop data: shape-valid output and real effects."""

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs.demo.pricing import price_order
from ucp_gateway.verbs.schemas import shape_validator

from .conftest import confirm_phrase, run, staff


def valid(env, shape):
    assert env["ok"], env
    errs = [e.message for e in shape_validator(shape).iter_errors(env["result"])]
    assert not errs, errs
    return env["result"]


def test_pricing_pure():
    lines = [
        {"product_id": "bouquet_roses", "quantity": 2, "unit_price": 3500},
        {"product_id": "pot_ceramic", "quantity": 1, "unit_price": 1500},
    ]
    promos = [{"id": "promo_2", "type": "free_shipping", "min_subtotal": None, "eligible_item_ids": ["bouquet_roses"]}]
    b = price_order(
        lines,
        {"code": "10OFF", "type": "percentage", "value": 10},
        {"id": "std-ship", "title": "Standard", "price": 500},
        promos,
    )
    assert (b.subtotal, b.discount, b.shipping, b.total, b.free_shipping_promo) == (8500, 850, 0, 7650, "promo_2")
    b = price_order(lines[1:], {"code": "F", "type": "fixed_amount", "value": 5000}, None, [])
    assert (b.discount, b.total) == (1500, 0)


async def test_customer_context(shop, dispatcher):
    r = valid(
        await run(dispatcher, staff(shop, "read_only"), "customer.context", {"customer_id": "cust_1"}), "aggregate"
    )
    assert r["data"]["order_count"] == 2 and r["data"]["lifetime_value"] > 0
    assert {x["type"] for x in r["relations"]} == {"order", "address", "crm_contact"}
    assert all("token" not in pm for pm in r["data"]["payment_methods"])


async def test_explain_total(shop, dispatcher):
    r = valid(await run(dispatcher, staff(shop), "orders.explain_total", {"order_id": "ord_1"}), "explain")
    actions = [s["action"] for s in r["causal_chain"]]
    assert actions == [
        "line_item",
        "line_item",
        "subtotal",
        "discount_applied",
        "shipping",
        "free_shipping_promotion",
        "total",
        "payment_captured",
    ]
    assert r["current_state"]["total"] == 7650 == r["current_state"]["paid"]
    assert r["reasoning"].startswith("Total $76.50 = subtotal $85.00, minus $8.50 for code 10OFF")


async def test_preview_refund_has_no_effect(shop, dispatcher, database):
    r = valid(
        await run(dispatcher, staff(shop), "payments.preview_refund_impact", {"order_id": "ord_1", "amount": 650}),
        "preview",
    )
    assert r["projected"]["status"] == "partially_refunded" and r["delta"]["net_change"] == -650 and not r["reversible"]
    full = valid(await run(dispatcher, staff(shop), "payments.preview_refund_impact", {"order_id": "ord_1"}), "preview")
    assert full["projected"]["status"] == "refunded"
    async with tenant_tx(database.pool, shop.id) as c:
        assert await c.fetchval("SELECT refunded_amount FROM sales_orders WHERE id = 'ord_1'") == 0
    too_much = await run(
        dispatcher, staff(shop), "payments.preview_refund_impact", {"order_id": "ord_1", "amount": 99999}
    )
    assert too_much["error"]["reason"] == "invalid_state"


async def test_refund_effects(shop, dispatcher, database):
    env = await confirm_phrase(
        dispatcher,
        staff(shop, "admin"),
        "payments.refund",
        {"order_id": "ord_1", "amount": 7650, "currency": "USD", "reason": "wilted"},
    )
    r = valid(env, "receipt")
    assert r["order_status"] == "refunded"
    async with tenant_tx(database.pool, shop.id) as c:
        assert await c.fetchval("SELECT status FROM sales_orders WHERE id = 'ord_1'") == "refunded"
    cur = await confirm_phrase(
        dispatcher, staff(shop, "admin"), "payments.refund", {"order_id": "ord_2", "amount": 10, "currency": "EUR"}
    )
    assert cur["error"]["reason"] == "invalid_arguments" and cur["error"]["path"] == "$.currency"
    chain = valid(await run(dispatcher, staff(shop), "orders.explain_total", {"order_id": "ord_1"}), "explain")
    assert chain["causal_chain"][-1]["action"] == "refund_issued"


async def test_suggestions(shop, dispatcher):
    r = valid(await run(dispatcher, staff(shop), "sales.suggest_next_actions", {"customer_id": "cust_1"}), "suggest")
    top = r["suggestions"][0]
    assert top["action"] == "crm_contact_update" and top["args"]["status"] == "vip" and top["confidence"] == 0.82
    assert top["confidence_band"] == "learning"  # 4 orders < 30 samples
    lost = valid(await run(dispatcher, staff(shop), "sales.suggest_next_actions", {"customer_id": "cust_3"}), "suggest")
    assert any(s["args"].get("status") == "active" for s in lost["suggestions"] if "args" in s)
    restock = valid(await run(dispatcher, staff(shop), "ap.suggest_restock", {}), "suggest")
    assert restock["suggestions"][0]["args"]["product_id"] == "gardenias"


async def test_commission_preview_and_contact_explain(shop, dispatcher):
    r = valid(await run(dispatcher, staff(shop), "commissions.preview_payout", {"rate_bps": 1000}), "preview")
    assert r["projected"]["commission_owed"] == (r["current"]["net_sales"] + 5) // 10
    await run(
        dispatcher, staff(shop, "employee"), "crm_contact_update", {"contact_id": 1, "notes": "called"}, confirm=True
    )
    e = valid(await run(dispatcher, staff(shop), "service.explain_contact_state", {"contact_id": 1}), "explain")
    assert [s["action"] for s in e["causal_chain"]].count("order_placed") == 2
    assert e["causal_chain"][-1]["action"] == "crm.contact.updated"


async def test_discount_create_and_revert(shop, dispatcher, database):
    p = staff(shop, "employee")
    env = await run(
        dispatcher, p, "discount_create", {"code": "SPRING5", "type": "percentage", "value": 5}, confirm=True
    )
    valid(env, "receipt")
    dup = await run(
        dispatcher, p, "discount_create", {"code": "SPRING5", "type": "percentage", "value": 5}, confirm=True
    )
    assert dup["error"]["reason"] == "already_exists"
    rev = await run(dispatcher, p, "audit.revert", {"audit_id": env["audit_id"]}, confirm=True)
    assert rev["result"]["reverted"]
    async with tenant_tx(database.pool, shop.id) as c:
        assert await c.fetchval("SELECT count(*) FROM discounts WHERE code = 'SPRING5'") == 0


async def test_subscribe_and_poll(shop, dispatcher, clock):
    p = staff(shop, "employee")
    sub = valid(await run(dispatcher, p, "events.subscribe", {"event_types": ["inventory.adjusted"]}), "subscribe")
    assert sub["initial_events"] == []
    for d in (1, 2, 3):
        await run(dispatcher, p, "inventory_adjust", {"product_id": "orchid_white", "delta": d}, confirm=True)
    await run(dispatcher, p, "crm_contact_update", {"contact_id": 1, "status": "vip"}, confirm=True)
    got = valid(
        await run(
            dispatcher,
            p,
            "events.poll",
            {"subscription_id": sub["subscription_id"], "cursor": sub["cursor"], "limit": 2},
        ),
        "subscribe",
    )
    assert [e["data"]["delta"] for e in got["events"]] == [1, 2] and got["has_more"]
    rest = valid(
        await run(dispatcher, p, "events.poll", {"subscription_id": sub["subscription_id"], "cursor": got["cursor"]}),
        "subscribe",
    )
    assert [e["data"]["delta"] for e in rest["events"]] == [3] and not rest["has_more"]
    stranger = await run(
        dispatcher,
        staff(shop, "employee", "mallory"),
        "events.poll",
        {"subscription_id": sub["subscription_id"], "cursor": "c_0"},
    )
    assert stranger["error"]["reason"] == "not_found"
    clock.advance(25 * 3600)
    lapsed = await run(dispatcher, p, "events.poll", {"subscription_id": sub["subscription_id"], "cursor": "c_0"})
    assert lapsed["error"]["reason"] == "not_found"


async def test_capability_manifest_waves(shop, dispatcher):
    import json

    p = staff(shop, "read_only")
    idx = valid(await run(dispatcher, p, "capability.manifest", {}), "discovery")
    assert idx["mode"] == "index" and len(json.dumps(idx)) < 1024 and idx["index"]["payments"] == 2
    lst = valid(await run(dispatcher, p, "capability.manifest", {"prefix": "payments"}), "discovery")
    assert {r["name"] for r in lst["rows"]} == {"payments.refund", "payments.preview_refund_impact"}
    assert "input_schema" not in json.dumps(lst)
    det = valid(await run(dispatcher, p, "capability.manifest", {"verbs": ["payments.refund", "nope"]}), "discovery")
    assert [v["name"] for v in det["verbs"]] == ["payments.refund"] and det["verbs"][0]["input_schema"]["required"]
    mcp = valid(
        await run(dispatcher, staff(shop, transport="ucp"), "capability.manifest", {"prefix": "payments"}), "discovery"
    )
    assert [r["name"] for r in mcp["rows"]] == ["payments.preview_refund_impact"]  # refund is not on ucp


async def test_capability_manifest_cursor_is_opaque_and_strict(shop, dispatcher):
    """Regression: ``cursor`` was a bare verb name, so "%%%" gave the first page and "AAAA" an empty one."""
    p = staff(shop, "read_only")
    first = valid(await run(dispatcher, p, "capability.manifest", {"mode": "list", "limit": 7}), "discovery")
    seen, cursor = [r["name"] for r in first["rows"]], first["next_cursor"]
    assert cursor and cursor != seen[-1]
    while cursor:  # a cursor alone continues the LIST wave
        page = valid(await run(dispatcher, p, "capability.manifest", {"cursor": cursor, "limit": 7}), "discovery")
        assert page["mode"] == "list"
        seen += [r["name"] for r in page["rows"]]
        cursor = page["next_cursor"]
    assert seen == sorted(set(seen)) and len(seen) == first["total"]
    for junk in ("%%%", "AAAA", "A", "7aCA", "cGF5bWVudHMucmVmdW5k=", "payments.refund", "x" * 256):
        env = await run(dispatcher, p, "capability.manifest", {"mode": "list", "cursor": junk})
        assert not env["ok"] and env["error"]["reason"] == "invalid_cursor", (junk, env)


async def test_discount_value_beyond_bigint_is_an_argument_error(shop, dispatcher, database):
    """A value of 2**63 or more once raised inside the verb (execution_failed and a traceback)."""
    p = staff(shop, "employee")
    for value in (2**63, 2**64 + 5):
        args = {"code": "HUGE1", "type": "fixed_amount", "value": value}
        env = await run(dispatcher, p, "discount_create", args, confirm=True)
        assert env["error"]["reason"] == "invalid_arguments" and "value" in env["error"]["path"], env
    args = {"code": "MAX1", "type": "fixed_amount", "value": 2**63 - 1}
    ok = await run(dispatcher, p, "discount_create", args, confirm=True)
    assert ok["ok"], ok
    async with tenant_tx(database.pool, shop.id) as c:
        assert await c.fetchval("SELECT count(*) FROM discounts WHERE code IN ('HUGE1', 'MAX1')") == 1

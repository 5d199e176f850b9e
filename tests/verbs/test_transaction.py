"""transaction and macro.run: one database transaction, child receipts, reverse-order revert."""

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs.schemas import shape_validator

from .conftest import confirm_phrase, run, staff


async def q(db, shop, sql, *a):
    async with tenant_tx(db.pool, shop.id) as c:
        return await c.fetchval(sql, *a)


def steps(*s):
    return {"steps": [{"verb": v, "args": a} for v, a in s]}


async def test_commit_and_reverse_order_revert(shop, dispatcher, database):
    p = staff(shop, "employee")
    tx = steps(
        ("crm_contact_update", {"contact_id": 1, "status": "vip"}),
        ("crm_contact_update", {"contact_id": 2, "status": "lead"}),
        ("inventory_adjust", {"product_id": "gardenias", "delta": 4}),
    )
    assert (await run(dispatcher, p, "transaction", tx))["error"]["reason"] == "dispatch_pending"
    env = await run(dispatcher, p, "transaction", tx, confirm=True)
    r = env["result"]
    assert shape_validator("transaction").is_valid(r) and r["status"] == "committed"
    assert [s["verb"] for s in r["steps"]] == ["crm_contact_update", "crm_contact_update", "inventory_adjust"]
    assert r["rollback_handle"] == f"tx:{r['transaction_id']}:rollback_all" and r["audit_id"] == env["audit_id"]
    assert (
        await q(
            database,
            shop,
            "SELECT count(*) FROM verb_audit_log WHERE entry->>'transaction_id' = $1",
            r["transaction_id"],
        )
        == 4
    )
    step = await run(dispatcher, p, "audit.revert", {"audit_id": r["steps"][0]["audit_id"]}, confirm=True)
    assert step["error"]["reason"] == "not_revertible"
    rev = await run(dispatcher, p, "audit.revert", {"audit_id": env["audit_id"]}, confirm=True)
    assert rev["result"]["reverted"], rev
    restored = await q(
        database, shop, "SELECT array_agg(entity_id ORDER BY seq) FROM agent_events WHERE type = 'crm.contact.restored'"
    )
    assert restored == ["2", "1"]  # reverse order of the steps
    assert await q(database, shop, "SELECT status FROM crm_contacts WHERE id = 1") == "active"
    assert await q(database, shop, "SELECT quantity FROM inventory WHERE product_id = 'gardenias'") == 0
    assert await q(database, shop, "SELECT count(*) FROM verb_reversals") == 4
    again = await run(dispatcher, p, "audit.revert", {"audit_id": env["audit_id"]}, confirm=True)
    assert again["error"]["reason"] == "already_reverted"


async def test_all_or_nothing(shop, dispatcher, database):
    p = staff(shop, "employee")
    tx = steps(
        ("crm_contact_update", {"contact_id": 1, "status": "vip"}),
        ("inventory_adjust", {"product_id": "gardenias", "delta": -5}),
    )
    env = await run(dispatcher, p, "transaction", tx, confirm=True)
    assert env["error"]["reason"] == "invalid_state" and env["error"]["path"].startswith("$.steps[1]")
    assert env["result"]["status"] == "aborted"
    assert [s["status"] for s in env["result"]["steps"]] == ["rolled_back", "failed"]
    assert await q(database, shop, "SELECT status FROM crm_contacts WHERE id = 1") == "active"
    assert await q(database, shop, "SELECT count(*) FROM verb_audit_log WHERE decision = 'allowed'") == 0
    assert await q(database, shop, "SELECT count(*) FROM verb_audit_log WHERE decision = 'failed'") == 1
    bad = await run(dispatcher, p, "transaction", steps(("customer.context", {"customer_id": 3})), confirm=True)
    assert bad["error"]["reason"] == "invalid_arguments"
    blocked = await run(dispatcher, p, "transaction", steps(("customer_delete", {})), confirm=True)
    assert blocked["error"]["reason"] == "blocked_verb"


async def test_financial_transaction_needs_joined_phrase(shop, dispatcher, database):
    tx = steps(
        ("crm_contact_update", {"contact_id": 1, "notes": "refunded"}),
        ("payments.refund", {"order_id": "ord_3", "amount": 500, "currency": "USD"}),
    )
    assert (await run(dispatcher, staff(shop, "employee"), "transaction", tx))["error"]["reason"] == "role_denied"
    pre = await run(dispatcher, staff(shop, "admin"), "transaction", tx)
    assert pre["pending"]["required_phrase"] == "REFUND $5.00 on order #ord_3"
    env = await confirm_phrase(dispatcher, staff(shop, "admin"), "transaction", tx)
    assert env["ok"], env
    assert await q(database, shop, "SELECT refunded_amount FROM sales_orders WHERE id = 'ord_3'") == 500
    rev = await run(dispatcher, staff(shop, "admin"), "audit.revert", {"audit_id": env["audit_id"]}, confirm=True)
    assert rev["error"]["reason"] == "no_revert_handler"
    assert await q(database, shop, "SELECT notes FROM crm_contacts WHERE id = 1") == "refunded"  # nothing undone


async def test_macro_run_and_revert(shop, dispatcher, database):
    p = staff(shop, "employee")
    env = await run(
        dispatcher, p, "macro.run", {"macro_id": "vip_followup", "override_args": {"1": {"value": 12}}}, confirm=True
    )
    r = env["result"]
    assert shape_validator("macro").is_valid(r) and [s["verb"] for s in r["steps"]] == [
        "crm_contact_update",
        "discount_create",
    ]
    assert await q(database, shop, "SELECT value FROM discounts WHERE code = 'VIPTHANKS'") == 12
    rev = await run(dispatcher, p, "audit.revert", {"audit_id": env["audit_id"]}, confirm=True)
    assert rev["ok"], rev
    assert await q(database, shop, "SELECT count(*) FROM discounts WHERE code = 'VIPTHANKS'") == 0
    assert await q(database, shop, "SELECT status FROM crm_contacts WHERE id = 1") == "active"
    missing = await run(dispatcher, p, "macro.run", {"macro_id": "nope"}, confirm=True)
    assert missing["error"]["reason"] == "not_found"


async def test_step_classes_refused(shop, dispatcher):
    p = staff(shop, "owner")
    irreversible = steps(("gdpr_delete_contact", {"contact_id": 1}))
    env = await run(dispatcher, p, "transaction", irreversible, confirm=True)
    assert env["error"]["reason"] == "step_class_not_allowed" and env["error"]["path"] == "$.steps[0].verb"
    nested = steps(("transaction", {"steps": []}))
    assert (await run(dispatcher, p, "transaction", nested, confirm=True))["error"]["reason"] in (
        "step_class_not_allowed",
        "invalid_arguments",
    )


async def test_step_arguments_checked_before_the_phrase(shop, dispatcher):
    tx = steps(("payments.refund", {"order_id": "ord_1", "currency": "USD"}))  # amount missing
    env = await run(dispatcher, staff(shop, "admin"), "transaction", tx)
    assert env["error"]["reason"] == "invalid_arguments" and env["error"]["path"] == "$.steps[0].args"

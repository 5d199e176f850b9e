"""Every write verb: its receipt (shape-valid), an idempotent replay with no second effect, and
its revert (or the structured refusal when it has no revert handler)."""

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs import Call
from ucp_gateway.verbs.schemas import shape_validator

from .conftest import run, staff

CASES = [
    ("crm_contact_update", {"contact_id": 2, "status": "vip"}, "employee", True),
    ("inventory_adjust", {"product_id": "pot_ceramic", "delta": 3}, "employee", True),
    ("discount_create", {"code": "TEST10", "type": "percentage", "value": 10}, "employee", True),
    ("payments.refund", {"order_id": "ord_2", "amount": 500, "currency": "USD"}, "admin", False),
    ("gdpr_delete_contact", {"contact_id": 3}, "owner", False),
    (
        "transaction",
        {"steps": [{"verb": "inventory_adjust", "args": {"product_id": "orchid_white", "delta": 1}}]},
        "employee",
        True,
    ),
    ("macro.run", {"macro_id": "vip_followup"}, "employee", True),
]


async def state(db, shop):
    async with tenant_tx(db.pool, shop.id) as c:
        return (
            await c.fetch("SELECT id, status FROM crm_contacts ORDER BY id"),
            await c.fetch("SELECT product_id, quantity FROM inventory ORDER BY product_id"),
            await c.fetch("SELECT code, value FROM discounts ORDER BY code"),
            await c.fetch("SELECT id, refunded_amount FROM sales_orders ORDER BY id"),
        )


@pytest.mark.parametrize("verb,args,role,revertible", CASES, ids=[c[0] for c in CASES])
async def test_receipt_replay_revert(shop, dispatcher, database, verb, args, role, revertible):
    p = staff(shop, role, human=True)  # typed phrases are entered on the human channel
    pre = await run(dispatcher, p, verb, args, idempotency_key="K")
    assert pre["error"]["reason"] == "dispatch_pending"
    pend = pre["pending"]
    call = Call(verb, args, True, pend.get("required_phrase"), pend.get("nonce"), "K")
    first = await dispatcher.dispatch(p, call)
    assert first["ok"], first
    shape = dispatcher.registry.get(verb).shape
    assert shape_validator(shape).is_valid(first["result"])
    assert first["result"]["audit_id"] == first["audit_id"] and first["idempotency_key"] == "K"
    after = await state(database, shop)
    again = await dispatcher.dispatch(p, Call(verb, args, True, None, None, "K"))
    assert again["replayed"] and again["result"] == first["result"]
    assert await state(database, shop) == after  # no second effect
    rev = await run(dispatcher, p, "audit.revert", {"audit_id": first["audit_id"]}, confirm=True)
    if revertible:
        assert rev["ok"] and rev["result"]["reverted"], rev
        assert await state(database, shop) != after
    else:
        assert rev["error"]["reason"] == "no_revert_handler" and rev["result"]["reverted"] is False
        assert await state(database, shop) == after

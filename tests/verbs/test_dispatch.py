"""Every reason code through the real dispatcher and database; receipts, replay, revert, audit rows."""

from datetime import UTC, datetime, timedelta

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs import Principal, Registry, RiskClass, VerbPolicy
from ucp_gateway.verbs.schemas import envelope_validator, shape_validator

from .conftest import confirm_phrase, run, staff

UPDATE = {"contact_id": 1, "status": "vip"}
REFUND = {"order_id": "ord_1", "amount": 1250, "currency": "USD"}


async def audit_rows(db, company):
    async with tenant_tx(db.pool, company.id) as c:
        return await c.fetch("SELECT audit_id, verb, decision, status, entry FROM verb_audit_log ORDER BY seq")


async def contact(db, company, cid=1):
    async with tenant_tx(db.pool, company.id) as c:
        return await c.fetchrow("SELECT * FROM crm_contacts WHERE id = $1", cid)


@pytest.mark.parametrize(
    "verb,args,role,kw,reason",
    [
        ("customer_delete", {}, "owner", {"confirm": True}, "blocked_verb"),
        ("customer.delete", {}, "owner", {}, "blocked_verb"),
        ("no.such_verb", {}, "owner", {}, "unknown_verb"),
        ("customer.context", {"customer_id": 1}, "owner", {}, "invalid_arguments"),
        ("customer.context", {"customer_id": "cust_1", "user_id": 3}, "owner", {}, "reserved_arg"),
        ("crm_contact_update", UPDATE, "read_only", {"confirm": True}, "role_denied"),
        ("payments.refund", REFUND, "employee", {}, "role_denied"),
        ("gdpr_delete_contact", {"contact_id": 1}, "admin", {}, "role_denied"),
        ("crm_contact_update", UPDATE, "employee", {}, "dispatch_pending"),
        (
            "payments.refund",
            REFUND,
            "admin",
            {"confirm": True, "typed_phrase": "REFUND $12.50 on order #ord_1"},
            "consent_channel_required",  # a bearer token never confirms money movement itself
        ),
        ("customer.context", {"customer_id": "nobody"}, "owner", {}, "not_found"),
    ],
)
async def test_denials_are_audited_and_change_nothing(shop, dispatcher, database, verb, args, role, kw, reason):
    before = await contact(database, shop)
    env = await run(dispatcher, staff(shop, role), verb, args, **kw)
    assert env["ok"] is False and env["error"]["reason"] == reason, env
    assert envelope_validator().is_valid(env)
    rows = await audit_rows(database, shop)
    assert len(rows) == 1 and rows[0]["entry"]["reason"] == reason and rows[0]["audit_id"] == env["audit_id"]
    assert rows[0]["entry"]["principal"]["role"] == role and rows[0]["entry"]["at"]
    assert await contact(database, shop) == before
    if reason == "invalid_arguments":
        assert env["error"]["path"] == "$.customer_id"


async def test_tier_denied_and_surface(shop, database, db_settings, clock):
    from ucp_gateway.verbs import Dispatcher

    r = Registry()
    r.register(
        {
            "name": "x.enterprise_report",
            "description": "x",
            "shape": "aggregate",
            "tier_floor": "enterprise",
            "input_schema": {"type": "object"},
            "surfaces": ["http"],
        },
        VerbPolicy(),
        lambda c: None,
    )
    d = Dispatcher(r, database.pool, db_settings, clock)
    assert (await run(d, staff(shop), "x.enterprise_report"))["error"]["reason"] == "tier_denied"
    env = await run(d, staff(shop, transport="mcp_stdio"), "x.enterprise_report")
    assert env["error"]["reason"] == "surface_not_allowed"


async def test_reversible_write_receipt_replay_revert(shop, dispatcher, database):
    p = staff(shop, "employee")
    pending = await run(dispatcher, p, "crm_contact_update", UPDATE)
    assert pending["error"]["reason"] == "dispatch_pending" and pending["pending"]["confirm"] == "click"
    assert (await contact(database, shop))["status"] == "active"
    env = await run(dispatcher, p, "crm_contact_update", UPDATE, confirm=True, idempotency_key="k-1")
    assert env["ok"], env
    r = env["result"]
    assert shape_validator("receipt").is_valid(r) and r["status"] == "completed" and r["idempotency_key"] == "k-1"
    assert r["rollback_handle"] == "crm:contact:1:pre_update_snapshot" == env["rollback_handle"]
    assert env["audit_id"] == r["audit_id"] and (await contact(database, shop))["status"] == "vip"
    # replay: same receipt, no second effect
    await _set_status(database, shop, "lead")
    again = await run(dispatcher, p, "crm_contact_update", UPDATE, confirm=True, idempotency_key="k-1")
    assert again["replayed"] is True and again["result"] == r
    assert (await contact(database, shop))["status"] == "lead"
    conflict = await run(
        dispatcher, p, "crm_contact_update", {**UPDATE, "status": "lost"}, confirm=True, idempotency_key="k-1"
    )
    assert conflict["error"]["reason"] == "idempotency_conflict"
    await _set_status(database, shop, "vip")
    rev = await run(dispatcher, p, "audit.revert", {"audit_id": r["audit_id"]}, confirm=True)
    assert rev["ok"] and rev["result"]["reverted"] is True and rev["result"]["audit_id"] == r["audit_id"]
    assert shape_validator("revert").is_valid(rev["result"])
    assert (await contact(database, shop))["status"] == "active"
    twice = await run(dispatcher, p, "audit.revert", {"audit_id": r["audit_id"]}, confirm=True)
    assert twice["error"]["reason"] == "already_reverted" and twice["result"]["reverted"] is False


async def _set_status(db, company, status):
    async with tenant_tx(db.pool, company.id) as c:
        await c.execute("UPDATE crm_contacts SET status = $1 WHERE id = 1", status)


async def test_three_wrong_phrases_spend_the_nonce(shop, dispatcher, database):
    """Regression: a wrong typed phrase left its nonce as good as new, so a confirm could be retried
    without limit. Now at most 3 per nonce (solid-verbs digest §8 G2); the third spends it."""
    p = staff(shop, "admin", human=True)
    pre = await run(dispatcher, p, "payments.refund", REFUND)
    nonce, phrase = pre["pending"]["nonce"], pre["pending"]["required_phrase"]
    hints = []
    for typed in ("REFUND $12.50", "refund it", ""):
        wrong = await run(dispatcher, p, "payments.refund", REFUND, confirm=True, typed_phrase=typed, nonce=nonce)
        assert wrong["error"]["reason"] == "phrase_mismatch" and not wrong["ok"]
        hints.append(wrong["error"]["hint"])
    assert hints[0] == f'Type exactly: "{phrase}" (2 attempts left with this nonce)'
    assert hints[1] == f'Type exactly: "{phrase}" (1 attempt left with this nonce)'
    assert hints[2].startswith("No attempts left with this nonce")
    late = await run(dispatcher, p, "payments.refund", REFUND, confirm=True, typed_phrase=phrase, nonce=nonce)
    assert late["error"]["reason"] == "nonce_used"  # the right phrase, too late: nothing ran
    rows = await audit_rows(database, shop)
    assert not [r for r in rows if r["decision"] == "allowed"]
    denials = [r["entry"] for r in rows if r["entry"].get("reason") == "phrase_mismatch"]
    assert [e["attempts_left"] for e in denials] == [2, 1, 0]
    ok = await confirm_phrase(dispatcher, p, "payments.refund", REFUND)  # a fresh nonce works
    assert ok["ok"] and ok["result"]["refund_id"] == "rf_ord_1_1"


async def test_wrong_phrases_below_the_limit_do_not_spend_the_nonce(shop, dispatcher):
    p = staff(shop, "admin", human=True)
    pre = await run(dispatcher, p, "payments.refund", REFUND)
    nonce, phrase = pre["pending"]["nonce"], pre["pending"]["required_phrase"]
    for _ in range(2):
        wrong = await run(dispatcher, p, "payments.refund", REFUND, confirm=True, typed_phrase="x", nonce=nonce)
        assert wrong["error"]["reason"] == "phrase_mismatch"
    ok = await run(dispatcher, p, "payments.refund", REFUND, confirm=True, typed_phrase=phrase, nonce=nonce)
    assert ok["ok"], ok


async def test_generated_key_and_expiry(shop, dispatcher, clock):
    p = staff(shop, "employee")
    env = await run(dispatcher, p, "inventory_adjust", {"product_id": "gardenias", "delta": 5}, confirm=True)
    assert len(env["idempotency_key"]) == 16
    a = {"product_id": "gardenias", "delta": 1}
    first = await run(dispatcher, p, "inventory_adjust", a, confirm=True, idempotency_key="x")
    clock.advance(timedelta(hours=24, seconds=1))
    later = await run(dispatcher, p, "inventory_adjust", a, confirm=True, idempotency_key="x")
    assert "replayed" not in later and later["audit_id"] != first["audit_id"]
    assert later["result"]["quantity"] == first["result"]["quantity"] + 1


async def test_failed_write_can_be_retried_with_same_key(shop, dispatcher):
    p = staff(shop, "employee")
    a = {"product_id": "gardenias", "delta": -1}  # 0 in stock
    bad = await run(dispatcher, p, "inventory_adjust", a, confirm=True, idempotency_key="retry")
    assert bad["error"]["reason"] == "invalid_state" and bad["audit_id"]
    await run(dispatcher, p, "inventory_adjust", {"product_id": "gardenias", "delta": 3}, confirm=True)
    ok = await run(dispatcher, p, "inventory_adjust", a, confirm=True, idempotency_key="retry")
    assert ok["ok"] and ok["result"]["quantity"] == 2


async def test_financial_typed_phrase_flow(shop, dispatcher, database, clock):
    p = staff(shop, "admin", human=True)
    pre = await run(dispatcher, p, "payments.refund", REFUND)
    assert pre["pending"]["required_phrase"] == "REFUND $12.50 on order #ord_1"
    assert pre["pending"]["risk_class"] == "WRITE_FINANCIAL" and pre["pending"]["cap_remaining"] == 25
    nonce = pre["pending"]["nonce"]
    wrong = await run(dispatcher, p, "payments.refund", REFUND, confirm=True, typed_phrase="REFUND $12.50", nonce=nonce)
    assert wrong["error"]["reason"] == "phrase_mismatch"
    other = await run(
        dispatcher,
        p,
        "payments.refund",
        {**REFUND, "amount": 1300},
        confirm=True,
        typed_phrase="REFUND $13.00 on order #ord_1",
        nonce=nonce,
    )
    assert other["error"]["reason"] == "nonce_invalid"
    bob = await run(
        dispatcher,
        staff(shop, "admin", "bob", human=True),
        "payments.refund",
        REFUND,
        confirm=True,
        typed_phrase="REFUND $12.50 on order #ord_1",
        nonce=nonce,
    )
    assert bob["error"]["reason"] == "nonce_invalid"
    ok = await run(
        dispatcher,
        p,
        "payments.refund",
        REFUND,
        confirm=True,
        typed_phrase=pre["pending"]["required_phrase"],
        nonce=nonce,
    )
    assert ok["ok"] and ok["result"]["refund_id"] == "rf_ord_1_1" and "rollback_handle" not in ok
    used = await run(
        dispatcher,
        p,
        "payments.refund",
        REFUND,
        confirm=True,
        typed_phrase=pre["pending"]["required_phrase"],
        nonce=nonce,
    )
    assert used["error"]["reason"] == "nonce_used"
    rows = await audit_rows(database, shop)
    allowed = next(r for r in rows if r["decision"] == "allowed")["entry"]
    assert allowed["approval"]["confirm"] == "typed_phrase" and allowed["approval"]["approved_by"] == "staff:alice"
    pre2 = await run(dispatcher, p, "payments.refund", REFUND)
    clock.advance(301)
    late = await run(
        dispatcher,
        p,
        "payments.refund",
        REFUND,
        confirm=True,
        typed_phrase=pre2["pending"]["required_phrase"],
        nonce=pre2["pending"]["nonce"],
    )
    assert late["error"]["reason"] == "nonce_expired"
    norev = await run(dispatcher, p, "audit.revert", {"audit_id": ok["audit_id"]}, confirm=True)
    assert norev["error"]["reason"] == "no_revert_handler" and norev["result"]["reverted"] is False


async def test_irreversible_owner_only(shop, dispatcher, database):
    env = await confirm_phrase(dispatcher, staff(shop, "owner"), "gdpr_delete_contact", {"contact_id": 2})
    assert env["ok"] and await contact(database, shop, 2) is None
    async with tenant_tx(database.pool, shop.id) as c:
        assert await c.fetchval("SELECT email FROM customers WHERE id = 'cust_2'") == "erased+cust_2@invalid"


async def test_revert_edge_cases(shop, dispatcher):
    p = staff(shop, "employee")
    assert (await run(dispatcher, p, "audit.revert", {"audit_id": 999999}, confirm=True))["error"][
        "reason"
    ] == "audit_not_found"
    denied = await run(dispatcher, staff(shop, "read_only"), "crm_contact_update", UPDATE, confirm=True)
    r = await run(dispatcher, p, "audit.revert", {"audit_id": denied["audit_id"]}, confirm=True)
    assert r["error"]["reason"] == "not_revertible"
    read = await run(dispatcher, p, "customer.context", {"customer_id": "cust_1"})
    r = await run(dispatcher, p, "audit.revert", {"audit_id": read["audit_id"]}, confirm=True)
    assert r["error"]["reason"] == "not_revertible"


async def test_daily_caps_and_midnight_reset(shop, database, db_settings, clock):
    from ucp_gateway.verbs import Dispatcher, build_registry

    db_settings.verbs_daily_caps = {"WRITE_REVERSIBLE": 3, "WRITE_FINANCIAL": 25, "IRREVERSIBLE": 10}
    d = Dispatcher(build_registry(), database.pool, db_settings, clock)
    clock.set(datetime(2026, 4, 8, 23, 59, 0, tzinfo=UTC))
    p = staff(shop, "employee")
    a = {"product_id": "pot_ceramic", "delta": 1}
    for _ in range(3):
        assert (await run(d, p, "inventory_adjust", a, confirm=True))["ok"]
    over = await run(d, p, "inventory_adjust", a, confirm=True)
    assert over["error"]["reason"] == "daily_cap_exceeded"
    # pending and denied calls do not count; a replay does not either
    clock.advance(61)  # 00:00:01 next day
    first = await run(d, p, "inventory_adjust", a, confirm=True, idempotency_key="n1")
    assert first["ok"]
    for _ in range(3):
        assert (await run(d, p, "inventory_adjust", a, confirm=True, idempotency_key="n1"))["replayed"]
    assert (await run(d, p, "inventory_adjust", a, confirm=True))["ok"]


async def test_buyer_not_counted_against_company_caps(shop, database, db_settings, clock):
    from ucp_gateway.verbs import Dispatcher, PrincipalLimit

    async def pay(ctx):
        return {"outcome": "paid", "amount": ctx.args["amount"]}

    r = Registry()
    r.register(
        {
            "name": "checkout.complete",
            "description": "Pay for a checkout.",
            "shape": "receipt",
            "side_effects": "write",
            "input_schema": {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}},
        },
        VerbPolicy(
            RiskClass.WRITE_FINANCIAL,
            principals=frozenset({"buyer"}),
            consent="payment_credential",
            principal_limit=PrincipalLimit(calls=5, amount=3000, amount_arg="amount"),
        ),
        pay,
    )
    db_settings.verbs_daily_caps = {"WRITE_FINANCIAL": 1}
    d = Dispatcher(r, database.pool, db_settings, clock)
    buyer = Principal("buyer", shop.id, "buyer", "https://platform.example/agent", "ucp")
    results = [await run(d, buyer, "checkout.complete", {"amount": 1000}) for _ in range(4)]
    assert [x["ok"] for x in results] == [True, True, True, False]
    assert results[3]["error"]["reason"] == "principal_limit_exceeded"
    other = Principal("buyer", shop.id, "buyer", "https://other.example/agent", "ucp")
    assert (await run(d, other, "checkout.complete", {"amount": 1000}))["ok"]


async def test_rls_isolation_between_companies(shop, dispatcher, database):
    from ucp_gateway.tenancy import create_company

    other = await create_company(database.pool, slug="other-shop", display_name="Other")
    env = await run(dispatcher, staff(shop, "employee"), "crm_contact_update", UPDATE, confirm=True)
    theirs = await run(
        dispatcher, staff(other, "employee"), "audit.revert", {"audit_id": env["audit_id"]}, confirm=True
    )
    assert theirs["error"]["reason"] == "audit_not_found"
    assert (await run(dispatcher, staff(other), "customer.context", {"customer_id": "cust_1"}))["error"][
        "reason"
    ] == "not_found"


async def test_default_caps_and_company_override(shop, dispatcher):
    from dataclasses import replace

    assert [dispatcher.cap_limit(shop, c) for c in ("WRITE_REVERSIBLE", "WRITE_FINANCIAL", "IRREVERSIBLE")] == [
        100,
        25,
        10,
    ]
    assert dispatcher.cap_limit(shop, None) is None
    custom = replace(shop, settings={"verbs": {"daily_caps": {"IRREVERSIBLE": 0, "WRITE_REVERSIBLE": None}}})
    assert (
        dispatcher.cap_limit(custom, "IRREVERSIBLE") == 0 and dispatcher.cap_limit(custom, "WRITE_REVERSIBLE") is None
    )


async def test_irreversible_class_disabled_by_company(shop, database, dispatcher):
    async with tenant_tx(database.pool, shop.id) as c:
        await c.execute("UPDATE companies SET settings = $1::jsonb", {"verbs": {"daily_caps": {"IRREVERSIBLE": 0}}})
    env = await run(dispatcher, staff(shop, "owner"), "gdpr_delete_contact", {"contact_id": 1})
    assert env["error"]["reason"] == "daily_cap_exceeded"


async def test_non_json_numbers_are_invalid_arguments(shop, dispatcher):
    env = await run(dispatcher, staff(shop), "customer.context", {"customer_id": "cust_1", "x": float("nan")})
    assert env["error"]["reason"] == "invalid_arguments" and env["audit_id"]


async def test_stored_receipt_names_its_audit_row(shop, dispatcher, database):
    """The audit row and the stored envelope are written by one statement: same audit id everywhere."""
    p = staff(shop, "employee")
    env = await run(dispatcher, p, "crm_contact_update", UPDATE, confirm=True, idempotency_key="k-aud")
    assert env["ok"] and env["audit_id"] == env["result"]["audit_id"] > 0
    async with tenant_tx(database.pool, shop.id) as c:
        rec = await c.fetchrow("SELECT audit_id, envelope FROM verb_idempotency WHERE key = 'k-aud'")
        row = await c.fetchrow("SELECT decision, verb FROM verb_audit_log WHERE audit_id = $1", env["audit_id"])
    assert rec["audit_id"] == env["audit_id"] and rec["envelope"] == env
    assert (row["decision"], row["verb"]) == ("allowed", "crm_contact_update")
    again = await run(dispatcher, p, "crm_contact_update", UPDATE, confirm=True, idempotency_key="k-aud")
    assert again == {**env, "replayed": True}

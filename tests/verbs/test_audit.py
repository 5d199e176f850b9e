"""The audit log: append-only in the database, hash-chained per company, verifiable."""

import argparse
import asyncio

import asyncpg
import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs.audit import verify_chain
from ucp_gateway.verbs.cli import cmd_audit_verify

from .conftest import confirm_phrase, run, staff


async def mixed_workload(d, shop):
    e, a, o = staff(shop, "employee"), staff(shop, "admin"), staff(shop, "owner")
    await run(d, staff(shop, "read_only"), "customer.context", {"customer_id": "cust_1"})
    await run(d, e, "crm_contact_update", {"contact_id": 1, "status": "vip"})  # pending
    w = await run(d, e, "crm_contact_update", {"contact_id": 1, "status": "vip"}, confirm=True, idempotency_key="m")
    await run(d, e, "crm_contact_update", {"contact_id": 1, "status": "vip"}, confirm=True, idempotency_key="m")
    await run(d, e, "customer_delete", {})
    await run(d, e, "payments.refund", {"order_id": "ord_1", "amount": 1, "currency": "USD"})
    await confirm_phrase(d, a, "payments.refund", {"order_id": "ord_1", "amount": 100, "currency": "USD"})
    await run(d, e, "audit.revert", {"audit_id": w["audit_id"]}, confirm=True)
    await run(d, e, "inventory_adjust", {"product_id": "gardenias", "delta": -5}, confirm=True)  # failed
    await asyncio.gather(*[run(d, o, "orders.explain_total", {"order_id": "ord_2"}) for _ in range(10)])


async def test_chain_verifies_after_mixed_workload(shop, dispatcher, database):
    await mixed_workload(dispatcher, shop)
    async with tenant_tx(database.pool, shop.id) as c:
        rep = await verify_chain(c, shop.id)
        decisions = {r["decision"] for r in await c.fetch("SELECT decision FROM verb_audit_log")}
    assert rep.ok and rep.rows == 20, rep
    assert decisions == {"allowed", "denied", "pending", "failed", "replayed"}


async def test_append_only_for_app_role_and_owner(shop, dispatcher, database):
    await run(dispatcher, staff(shop), "customer.context", {"customer_id": "cust_1"})
    for stmt in ("UPDATE verb_audit_log SET status = 'x'", "DELETE FROM verb_audit_log"):
        with pytest.raises(asyncpg.PostgresError):
            async with tenant_tx(database.pool, shop.id) as c:
                await c.execute(stmt)
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        for stmt in ("UPDATE verb_audit_log SET status = 'x'", "DELETE FROM verb_audit_log", "TRUNCATE verb_audit_log"):
            with pytest.raises(asyncpg.PostgresError, match="append-only"):
                await owner.execute(stmt)
    finally:
        await owner.close()


async def _superuser_edit(database, sql):
    su = await asyncpg.connect(database.owner_dsn)  # the test cluster's owner is a superuser
    try:
        async with su.transaction():
            await su.execute("SET LOCAL session_replication_role = replica")  # triggers off
            await su.execute(sql)
    finally:
        await su.close()


@pytest.mark.parametrize(
    "sql,problem",
    [
        ("UPDATE verb_audit_log SET entry = jsonb_set(entry, '{reason}', '\"ok\"') WHERE seq = 5", "row_hash"),
        ("UPDATE verb_audit_log SET decision = 'allowed' WHERE seq = 5", "indexed columns"),
        ("DELETE FROM verb_audit_log WHERE seq = 5", "sequence gap"),
        ("DELETE FROM verb_audit_log WHERE seq = (SELECT max(seq) FROM verb_audit_log)", "head"),
    ],
)
async def test_verify_detects_superuser_edit(shop, dispatcher, database, db_settings, capsys, sql, problem):
    await mixed_workload(dispatcher, shop)
    async with tenant_tx(database.pool, shop.id) as c:
        fifth = await c.fetchval("SELECT audit_id FROM verb_audit_log WHERE seq = 5")
    await _superuser_edit(database, sql)
    async with tenant_tx(database.pool, shop.id) as c:
        rep = await verify_chain(c, shop.id)
    assert not rep.ok and problem in rep.problem
    if problem != "head":
        assert rep.broken_audit_id in (fifth, fifth + 1) and rep.broken_seq in (5, 6)
    code = await cmd_audit_verify(argparse.Namespace(company="flower-shop", json=False), db_settings)
    out = capsys.readouterr().out
    assert code == 1 and "BROKEN" in out


async def test_cli_verify_intact(shop, dispatcher, db_settings, capsys):
    await run(dispatcher, staff(shop), "customer.context", {"customer_id": "cust_1"})
    assert await cmd_audit_verify(argparse.Namespace(company="flower-shop", json=True), db_settings) == 0
    assert '"ok": true' in capsys.readouterr().out


async def test_trail_and_reputation(shop, dispatcher):
    await mixed_workload(dispatcher, shop)
    a = staff(shop, "admin")
    page = await run(dispatcher, a, "audit.trail", {"limit": 5})
    assert page["ok"] and len(page["result"]["entries"]) == 5 and page["result"]["next_cursor"]
    nxt = await run(dispatcher, a, "audit.trail", {"limit": 5, "cursor": page["result"]["next_cursor"]})
    ids = [x["audit_id"] for x in page["result"]["entries"] + nxt["result"]["entries"]]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 10
    denied = await run(dispatcher, a, "audit.trail", {"decision": "denied"})
    assert {x["reason"] for x in denied["result"]["entries"]} >= {"blocked_verb", "role_denied"}
    assert (await run(dispatcher, staff(shop, "employee"), "audit.trail", {}))["error"]["reason"] == "role_denied"
    rep = await run(dispatcher, a, "verbs.reputation", {})
    scores = {s["verb"]: s for s in rep["result"]["scores"]}
    cu = scores["crm_contact_update"]
    assert cu["success_rate"] == 1.0 and cu["revert_rate"] == 1.0 and cu["star_rating"] == 0.0
    assert scores["inventory_adjust"]["success_rate"] == 0.0
    assert scores["orders.explain_total"]["star_rating"] == 5.0 and scores["orders.explain_total"]["p50_ms"] > 0
    assert scores["customer_delete"]["denial_rate"] == 1.0 and scores["customer_delete"]["success_rate"] is None

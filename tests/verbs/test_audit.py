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
        ("UPDATE verb_audit_log SET entry = jsonb_set(entry, '{reason}', '\"ok\"') WHERE {row}", "row_hash"),
        ("UPDATE verb_audit_log SET decision = 'allowed' WHERE {row}", "indexed columns"),
        ("DELETE FROM verb_audit_log WHERE {row}", "sequence gap"),
        ("UPDATE verb_audit_log SET lane = (lane + 1) % 16 WHERE {row}", "sequence gap"),
        (
            "DELETE FROM verb_audit_log WHERE lane = {lane}"
            " AND seq = (SELECT max(seq) FROM verb_audit_log WHERE lane = {lane})",
            "head",
        ),
    ],
)
async def test_verify_detects_superuser_edit(shop, dispatcher, database, db_settings, capsys, sql, problem):
    await mixed_workload(dispatcher, shop)
    async with tenant_tx(database.pool, shop.id) as c:
        lane = await c.fetchval("SELECT lane FROM verb_audit_log GROUP BY lane ORDER BY count(*) DESC LIMIT 1")
        fifth = await c.fetchval("SELECT audit_id FROM verb_audit_log WHERE lane = $1 AND seq = 5", lane)
    assert fifth is not None  # the busiest lane has at least 5 rows
    await _superuser_edit(database, sql.replace("{row}", f"lane = {lane} AND seq = 5").replace("{lane}", str(lane)))
    async with tenant_tx(database.pool, shop.id) as c:
        rep = await verify_chain(c, shop.id)
    assert not rep.ok and problem in rep.problem, rep
    if problem != "head":
        assert rep.broken_seq in (5, 6) and rep.broken_audit_id is not None
        assert rep.broken_lane in (lane, (lane + 1) % 16)
    else:
        assert rep.broken_lane == lane
    code = await cmd_audit_verify(argparse.Namespace(company="flower-shop", json=False), db_settings)
    out = capsys.readouterr().out
    assert code == 1 and "BROKEN" in out


async def _lane_of(conn, subject: str) -> int:
    return await conn.fetchval("SELECT (hashtextextended($1, 0) & 15)::int", subject)


async def _subject(conn, prefix: str, *, lane: int, same: bool) -> str:
    """A subject whose lane is (``same``) or is not (not ``same``) ``lane``."""
    for i in range(500):
        if (await _lane_of(conn, f"{prefix}-{i}") == lane) == same:
            return f"{prefix}-{i}"
    raise AssertionError("no such subject")


async def _append(conn, shop, subject: str) -> int:
    """Append one audit row for ``subject`` (through the app role, RLS on); returns its audit_id."""
    from datetime import UTC, datetime

    from ucp_gateway.verbs.audit import append, iso

    entry = {
        "at": iso(datetime.now(UTC)),
        "verb": "x.test",
        "decision": "allowed",
        "status": "ok",
        "company_id": str(shop.id),
        "principal": {"subject": subject},
    }
    return (await append(conn, shop.id, entry))[0]


async def test_lanes_spread_principals_and_verify(shop, dispatcher, database):
    """Distinct principals land in distinct lanes (one head each); every lane verifies."""
    await mixed_workload(dispatcher, shop)
    for i in range(8):  # one after another: each its own transaction
        await run(dispatcher, staff(shop, "owner", subject=f"user-{i}"), "customer.context", {"customer_id": "cust_1"})
    async with tenant_tx(database.pool, shop.id) as c:
        per_lane = await c.fetch("SELECT lane, count(*) AS n, max(seq) AS top FROM verb_audit_log GROUP BY lane")
        heads = {r["lane"]: r["seq"] for r in await c.fetch("SELECT lane, seq FROM verb_audit_heads")}
        rep = await verify_chain(c, shop.id)
    assert len(per_lane) > 1, per_lane
    assert {r["lane"]: r["top"] for r in per_lane} == heads and all(r["n"] == r["top"] for r in per_lane)
    assert rep.ok and rep.rows == sum(r["n"] for r in per_lane)


async def test_one_lane_per_transaction(shop, database):
    """A transaction appending for two principals keeps the first one's lane (never two heads, so
    group transactions cannot deadlock on heads); the next transaction picks its own lane."""
    async with tenant_tx(database.pool, shop.id) as c:
        a = "lane-test-a"
        b = await _subject(c, "lane-test", lane=await _lane_of(c, a), same=False)
        ids = [await _append(c, shop, a), await _append(c, shop, b)]
    async with tenant_tx(database.pool, shop.id) as c:
        ids.append(await _append(c, shop, b))
        lanes = [await c.fetchval("SELECT lane FROM verb_audit_log WHERE audit_id = $1", i) for i in ids]
        assert lanes == [await _lane_of(c, a), await _lane_of(c, a), await _lane_of(c, b)]
        assert (await verify_chain(c, shop.id)).ok


async def test_lanes_do_not_wait_on_each_other(shop, database):
    """An open transaction holding one lane's head does not block an append in another lane: the
    head lock (held through COMMIT's WAL flush) serialises only one lane."""
    async with tenant_tx(database.pool, shop.id) as c:
        a = "lane-wait-a"
        b = await _subject(c, "lane-wait", lane=await _lane_of(c, a), same=False)
        same = await _subject(c, "lane-same", lane=await _lane_of(c, a), same=True)
    holder = database.pool.acquire()
    conn = await holder.__aenter__()
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute("SELECT set_config('app.company_id', $1, true)", str(shop.id))
        await _append(conn, shop, a)  # lane la's head is now locked until this transaction ends

        async def other(subject):
            async with tenant_tx(database.pool, shop.id) as c2:
                await _append(c2, shop, subject)

        await asyncio.wait_for(other(b), timeout=5)  # another lane: no wait
        blocked = asyncio.create_task(other(same))
        await asyncio.sleep(0.3)
        assert not blocked.done()  # the same lane waits for the holder
    finally:
        await tx.commit()
        await holder.__aexit__(None, None, None)
    await asyncio.wait_for(blocked, timeout=5)
    async with tenant_tx(database.pool, shop.id) as c:
        assert (await verify_chain(c, shop.id)).ok


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


async def test_trail_refuses_bad_dates_as_argument_errors(shop, dispatcher):
    """Bad ``since``/``until`` once raised inside the verb (execution_failed and a traceback)."""
    a = staff(shop, "admin")
    for bad in ("yesterday", "2026-13-01T00:00:00Z", "2026-04-08T12:00:00", "0001-01-01T00:00:00+05:00", "2026"):
        for name in ("since", "until"):
            env = await run(dispatcher, a, "audit.trail", {name: bad})
            assert not env["ok"] and env["error"]["reason"] == "invalid_arguments", (bad, env)
            assert env["error"]["path"] == f"$.{name}", env
    env = await run(
        dispatcher, a, "audit.trail", {"since": "2026-04-08T00:00:00z", "until": "2026-04-09T00:00:00+02:00"}
    )
    assert env["ok"], env

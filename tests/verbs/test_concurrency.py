"""Concurrency guarantees come from PostgreSQL: idempotent duplicates, caps across replicas, nonces."""

import asyncio

from ucp_gateway.db import tenant_tx
from ucp_gateway.db.database import connect_database
from ucp_gateway.verbs import Call, Dispatcher, build_registry

from .conftest import run, staff


async def test_fifty_parallel_duplicates_execute_once(shop, dispatcher, database):
    p = staff(shop, "employee")
    a = {"product_id": "bouquet_roses", "delta": 7}
    envs = await asyncio.gather(
        *[run(dispatcher, p, "inventory_adjust", a, confirm=True, idempotency_key="dup") for _ in range(50)]
    )
    assert all(e["ok"] for e in envs), [e for e in envs if not e["ok"]][:1]
    receipts = {repr(sorted(e["result"].items())) for e in envs}
    assert len(receipts) == 1
    assert sum(1 for e in envs if not e.get("replayed")) == 1
    async with tenant_tx(database.pool, shop.id) as c:
        assert await c.fetchval("SELECT quantity FROM inventory WHERE product_id = 'bouquet_roses'") == 1007
        assert await c.fetchval("SELECT count(*) FROM verb_audit_log WHERE decision = 'allowed'") == 1
        assert await c.fetchval("SELECT count(*) FROM verb_audit_log WHERE decision = 'replayed'") == 49


async def test_two_instances_cannot_exceed_a_cap(shop, database, db_settings, clock):
    db_settings.verbs_daily_caps = {"WRITE_REVERSIBLE": 10}
    other_db = await connect_database(db_settings, migrate=False)
    try:
        d1 = Dispatcher(build_registry(), database.pool, db_settings, clock)
        d2 = Dispatcher(build_registry(), other_db.pool, db_settings, clock)
        p = staff(shop, "employee")
        a = {"product_id": "pot_ceramic", "delta": 1}
        envs = await asyncio.gather(
            *[run(d, p, "inventory_adjust", a, confirm=True) for _ in range(15) for d in (d1, d2)]
        )
    finally:
        await other_db.close()
    assert sum(e["ok"] for e in envs) == 10
    assert {e["error"]["reason"] for e in envs if not e["ok"]} == {"daily_cap_exceeded"}
    async with tenant_tx(database.pool, shop.id) as c:
        assert await c.fetchval("SELECT quantity FROM inventory WHERE product_id = 'pot_ceramic'") == 2010
        assert await c.fetchval("SELECT used FROM verb_daily_usage WHERE cap_class = 'WRITE_REVERSIBLE'") == 10


async def test_nonce_confirmed_twice_in_parallel_succeeds_once(shop, dispatcher, database):
    p = staff(shop, "admin", human=True)
    args = {"order_id": "ord_2", "amount": 100, "currency": "USD"}
    pre = await run(dispatcher, p, "payments.refund", args)
    call = Call("payments.refund", args, True, pre["pending"]["required_phrase"], pre["pending"]["nonce"])
    envs = await asyncio.gather(*[dispatcher.dispatch(p, call) for _ in range(2)])
    assert sorted(e["ok"] for e in envs) == [False, True]
    assert [e["error"]["reason"] for e in envs if not e["ok"]] == ["nonce_used"]
    async with tenant_tx(database.pool, shop.id) as c:
        assert await c.fetchval("SELECT count(*) FROM refunds") == 1


async def test_read_group_transaction_isolates_a_failing_call(shop, database, db_settings, clock):
    from ucp_gateway.verbs.audit import verify_chain

    reg = build_registry()

    async def divide(ctx):
        await ctx.conn.fetchval("SELECT 1 / $1::int", ctx.args["d"])
        return {"entity_id": ctx.args["d"], "data": {}}

    _register_read(reg, "x.divide", "d", divide)
    d = Dispatcher(reg, database.pool, db_settings, clock)
    p = staff(shop, "read_only")
    envs = await asyncio.gather(*[run(d, p, "x.divide", {"d": i % 5}) for i in range(30)])
    assert [e["ok"] for e in envs] == [i % 5 != 0 for i in range(30)]
    assert {e["error"]["reason"] for e in envs if not e["ok"]} == {"execution_failed"}
    assert len({e["audit_id"] for e in envs}) == 30
    async with tenant_tx(database.pool, shop.id) as c:
        assert (await verify_chain(c, shop.id)).rows == 30


def _register_read(reg, name: str, arg: str, handler) -> None:
    """Register a test READ verb ``name`` taking one integer argument ``arg``."""
    from ucp_gateway.verbs import RiskClass, VerbPolicy

    schema = {"type": "object", "properties": {arg: {"type": "integer"}}}
    reg.register(
        {"name": name, "description": "x", "shape": "aggregate", "input_schema": schema},
        VerbPolicy(RiskClass.READ),
        handler,
    )


async def test_unstorable_argument_value_is_invalid_arguments(shop, database, db_settings, clock):
    """A value the database cannot hold (out of range) is the caller's fault: invalid_arguments, not 503."""

    reg = build_registry()

    async def narrow(ctx):
        await ctx.conn.fetchval("SELECT $1::bigint::smallint", ctx.args["n"])
        return {"entity_id": "n", "data": {}}

    _register_read(reg, "x.narrow", "n", narrow)
    d = Dispatcher(reg, database.pool, db_settings, clock)
    ok, bad = [await run(d, staff(shop, "read_only"), "x.narrow", {"n": n}) for n in (7, 10**6)]
    assert ok["ok"] and not bad["ok"]
    assert bad["error"]["reason"] == "invalid_arguments", bad

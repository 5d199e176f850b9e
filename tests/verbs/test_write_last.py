"""VerbContext.write_last: a write handler's last statement goes out inside the dispatcher's closing
statement (audit row + idempotency record) and commits or fails with everything else."""

from __future__ import annotations

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs import Dispatcher, Principal, Registry, RiskClass, VerbPolicy
from ucp_gateway.verbs.audit import verify_chain
from ucp_gateway.verbs.context import VerbContext
from ucp_gateway.verbs.decide import Call
from ucp_gateway.verbs.policy import BUYER_ROLE, Consent
from ucp_gateway.verbs.store import _shift_params

INSERT = "INSERT INTO products (company_id, id, title, price) VALUES ($1, $2, 'x', $3)"


def _register(reg: Registry, name: str, handler) -> Registry:
    """``reg`` with a buyer write verb ``name`` (receipt shape, no consent) run by ``handler``."""
    reg.register(
        {
            "name": name,
            "description": "x",
            "shape": "receipt",
            "side_effects": "write",
            "surfaces": ["ucp"],
            "input_schema": {"type": "object"},
        },
        VerbPolicy(RiskClass.WRITE_REVERSIBLE, consent=Consent.NONE, principals=frozenset({"buyer"})),
        handler,
    )
    return reg


def _registry(seen: list) -> Registry:
    reg = Registry()

    async def add(ctx):
        owner = ctx.company.id if ctx.args.get("own", True) else ctx.args["other"]
        for pid in ctx.args["ids"]:
            await ctx.write_last(INSERT, owner, pid, 100)
        seen.append(ctx.last_write is not None)  # deferred: not yet sent
        return {"added": len(ctx.args["ids"])}

    return _register(reg, "x.add_products", add)


async def _products(db, company) -> list[str]:
    async with tenant_tx(db.pool, company.id) as c:
        return [r["id"] for r in await c.fetch("SELECT id FROM products WHERE title = 'x' ORDER BY id")]


@pytest.fixture
def buyer(shop):
    return Principal("buyer", shop.id, BUYER_ROLE, "https://agent.example/profile", "ucp")


async def test_deferred_write_commits_with_the_audit_row(shop, database, db_settings, clock, buyer):
    seen: list = []
    d = Dispatcher(_registry(seen), database.pool, db_settings, clock)
    env = await d.dispatch(buyer, Call("x.add_products", {"ids": ["w1"]}, idempotency_key="k1"))
    assert env["ok"], env
    assert seen == [True]
    assert await _products(database, shop) == ["w1"]
    replay = await d.dispatch(buyer, Call("x.add_products", {"ids": ["w1"]}, idempotency_key="k1"))
    assert replay["replayed"] and replay["audit_id"] == env["audit_id"]
    async with tenant_tx(database.pool, shop.id) as c:
        assert (await verify_chain(c, shop.id)).ok


async def test_a_second_write_last_runs_the_first_at_once(shop, database, db_settings, clock, buyer):
    d = Dispatcher(_registry([]), database.pool, db_settings, clock)
    env = await d.dispatch(buyer, Call("x.add_products", {"ids": ["w2", "w3", "w4"]}, idempotency_key="k2"))
    assert env["ok"], env
    assert await _products(database, shop) == ["w2", "w3", "w4"]


async def test_a_failing_deferred_write_rolls_everything_back(shop, database, db_settings, clock, buyer):
    d = Dispatcher(_registry([]), database.pool, db_settings, clock)
    other = "00000000-0000-4000-8000-000000000001"  # another company's id: RLS refuses the row
    env = await d.dispatch(
        buyer, Call("x.add_products", {"ids": ["w5"], "own": False, "other": other}, idempotency_key="k3")
    )
    assert not env["ok"] and env["error"]["reason"] == "execution_failed", env
    assert await _products(database, shop) == []
    # the idempotency claim rolled back with it: the key is free for a (different) call
    again = await d.dispatch(buyer, Call("x.add_products", {"ids": ["w6"]}, idempotency_key="k3"))
    assert again["ok"], again
    assert await _products(database, shop) == ["w6"]


def test_deferred_sql_may_hold_numbered_parameters_only_and_no_returning():
    assert _shift_params("UPDATE t SET a = $1 WHERE b = $12", 12) == "UPDATE t SET a = $13 WHERE b = $24"
    for bad in ("DO $$ BEGIN END $$", "UPDATE t SET a = $1 RETURNING a"):
        with pytest.raises(ValueError):
            _shift_params(bad, 12)


# A guarded write (write_last otherwise=): two products, written together or not at all ($4).
CTES = "g1 AS (INSERT INTO products (company_id, id, title, price) SELECT $1, $2, 'x', 100 WHERE $4 RETURNING 1)"
LAST = "INSERT INTO products (company_id, id, title, price) SELECT $1, $3, 'x', 100 WHERE $4"


def _guarded_registry(calls: list, conns: list) -> Registry:
    reg = Registry()

    async def fallback():
        calls.append("otherwise")
        await calls_write(fallback.ctx)
        return {"added": 0}

    async def calls_write(ctx):  # the fallback's own last write: deferred again, unguarded
        await ctx.write_last(INSERT, ctx.company.id, ctx.args["b"] + "-none", 100)

    async def add_pair(ctx):
        if ctx.args.get("log"):  # log the statements sent from here on (the test removes the logger)
            raw = ctx.conn._con  # the pooled connection itself (the proxy is released after the call)
            raw.add_query_logger(conns.append)
            conns.append(raw)
        fallback.ctx = ctx
        got = await ctx.write_last(
            LAST, ctx.company.id, ctx.args["a"], ctx.args["b"], ctx.args["ok"], ctes=CTES, otherwise=fallback
        )
        calls.append(got)
        if got is False:  # run at once (no closing statement): the handler answers itself
            return {"added": 0}
        return {"added": 2}

    return _register(reg, "x.add_pair", add_pair)


async def _audit_rows(db, company) -> list:
    async with tenant_tx(db.pool, company.id) as c:
        assert (await verify_chain(c, company.id)).ok
        return list(await c.fetch("SELECT audit_id AS id, status, decision FROM verb_audit_log ORDER BY audit_id"))


async def test_a_guarded_write_goes_out_with_the_audit_row(shop, database, db_settings, clock, buyer):
    calls: list = []
    conns: list = []
    d = Dispatcher(_guarded_registry(calls, conns), database.pool, db_settings, clock)
    before = len(await _audit_rows(database, shop))
    env = await d.dispatch(
        buyer, Call("x.add_pair", {"a": "g1", "b": "g2", "ok": True, "log": True}, idempotency_key="gk1")
    )
    raw = conns[0]
    raw.remove_query_logger(conns.append)
    assert env["ok"] and env["result"]["added"] == 2, env
    assert calls == [None]  # deferred; the fallback never ran
    assert await _products(database, shop) == ["g1", "g2"]
    assert len(await _audit_rows(database, shop)) == before + 1
    # after the handler, one closing statement (its write, the audit row and the record), then COMMIT
    sent = [q.query for q in conns[1:]]
    assert len(sent) == 2 and sent[1].startswith("COMMIT"), sent
    assert "g1 AS (INSERT" in sent[0] and "verb_audit_append" in sent[0] and "FROM w) > 0" in sent[0]


async def test_a_guarded_write_that_writes_nothing_answers_the_fallback(shop, database, db_settings, clock, buyer):
    calls: list = []
    d = Dispatcher(_guarded_registry(calls, []), database.pool, db_settings, clock)
    before = len(await _audit_rows(database, shop))
    call = Call("x.add_pair", {"a": "h1", "b": "h2", "ok": False}, idempotency_key="hk1")
    env = await d.dispatch(buyer, call)
    assert env["ok"] and env["result"]["added"] == 0, env
    assert calls == [None, "otherwise"]
    # nothing of the guarded write; the fallback's own deferred write committed with the audit row
    assert await _products(database, shop) == ["h2-none"]
    rows = await _audit_rows(database, shop)
    assert len(rows) == before + 1 and rows[-1]["id"] == env["audit_id"] and rows[-1]["status"] == "completed"
    replay = await d.dispatch(buyer, call)
    assert replay["replayed"] and replay["result"] == env["result"] and replay["audit_id"] == env["audit_id"]
    assert calls == [None, "otherwise"]  # executed once


async def test_a_guarded_write_without_a_closing_statement_runs_at_once(shop, database, clock, buyer):
    """As for child verbs (no closing statement): it runs at once and says whether it wrote."""

    async def never():
        raise AssertionError("the handler answers itself")

    async with tenant_tx(database.pool, shop.id) as conn:
        ctx = VerbContext(conn, {}, buyer, shop, clock.now(), None, None)  # type: ignore[arg-type]
        assert await ctx.write_last(LAST, shop.id, "i1", "i2", False, ctes=CTES, otherwise=never) is False
        assert await ctx.write_last(LAST, shop.id, "i3", "i4", True, ctes=CTES, otherwise=never) is True
        assert ctx.last_write is None and ctx.otherwise is None
    assert await _products(database, shop) == ["i3", "i4"]


def test_deferred_with_items_may_return_but_not_take_the_closing_statement_names():
    shifted = _shift_params(CTES, 14, ctes=True)
    assert shifted.startswith("g1 AS (INSERT") and "$15" in shifted and "$1," not in shifted
    for bad in ("w AS (DELETE FROM t RETURNING 1)", "x AS (SELECT 1), a AS (SELECT 2)", "F AS (SELECT $$x$$)"):
        with pytest.raises(ValueError):
            _shift_params(bad, 14, ctes=True)


async def test_only_a_storage_failure_is_marked_retryable(shop, database, db_settings, clock, buyer):
    """A verb that breaks (a handler bug, a statement that divides by zero) fails with execution_failed
    and no retry hint, which the UCP bindings answer 500 internal_error; a statement the server
    cancelled carries RETRY_HINT, answered 503 with Retry-After (commerce.verbs.envelope_error); a
    connection the server dropped mid-verb is a 503 as well, never hidden behind an AttributeError
    of the released connection (which made it a 500)."""
    from ucp_gateway.commerce.verbs import envelope_error
    from ucp_gateway.db.outage import DatabaseUnavailable
    from ucp_gateway.verbs.errors import RETRY_HINT

    async def buggy(ctx):
        return {"added": None.count}  # an AttributeError, as the attribution bug was

    async def divide(ctx):
        await ctx.conn.fetchval("SELECT 1 / 0")
        return {"added": 0}

    async def cancelled(ctx):
        await ctx.conn.execute("SET LOCAL statement_timeout = 1")
        await ctx.conn.execute("SELECT pg_sleep(1)")
        return {"added": 0}

    async def dropped(ctx):
        await ctx.conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return {"added": 0}

    reg = Registry()
    for name, handler in (("x.buggy", buggy), ("x.divide", divide), ("x.cancelled", cancelled), ("x.dropped", dropped)):
        _register(reg, name, handler)
    d = Dispatcher(reg, database.pool, db_settings, clock)
    for name in ("x.buggy", "x.divide"):
        env = await d.dispatch(buyer, Call(name, {}, idempotency_key=f"k-{name}"))
        assert env["error"]["reason"] == "execution_failed" and "hint" not in env["error"], env
        status, body = envelope_error(env)
        assert status == 500 and b'"code":"internal_error"' in body and b"Traceback" not in body
    env = await d.dispatch(buyer, Call("x.cancelled", {}, idempotency_key="k-cancelled"))
    assert env["error"]["reason"] == "execution_failed" and env["error"]["hint"] == RETRY_HINT, env
    assert envelope_error(env)[0] == 503
    try:  # an outage (the transport's 503) or a transient failure (503 too): never a 500
        env = await d.dispatch(buyer, Call("x.dropped", {}, idempotency_key="k-dropped"))
    except DatabaseUnavailable:
        return
    assert env["error"]["hint"] == RETRY_HINT and envelope_error(env)[0] == 503, env

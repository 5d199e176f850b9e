"""VerbContext.write_last: a write handler's last statement goes out inside the dispatcher's closing
statement (audit row + idempotency record) and commits or fails with everything else."""

from __future__ import annotations

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs import Dispatcher, Principal, Registry, RiskClass, VerbPolicy
from ucp_gateway.verbs.audit import verify_chain
from ucp_gateway.verbs.decide import Call
from ucp_gateway.verbs.policy import BUYER_ROLE, Consent
from ucp_gateway.verbs.store import _shift_params

INSERT = "INSERT INTO products (company_id, id, title, price) VALUES ($1, $2, 'x', $3)"


def _registry(seen: list) -> Registry:
    reg = Registry()

    async def add(ctx):
        owner = ctx.company.id if ctx.args.get("own", True) else ctx.args["other"]
        for pid in ctx.args["ids"]:
            await ctx.write_last(INSERT, owner, pid, 100)
        seen.append(ctx.last_write is not None)  # deferred: not yet sent
        return {"added": len(ctx.args["ids"])}

    reg.register(
        {
            "name": "x.add_products",
            "description": "x",
            "shape": "receipt",
            "side_effects": "write",
            "surfaces": ["ucp"],
            "input_schema": {"type": "object"},
        },
        VerbPolicy(RiskClass.WRITE_REVERSIBLE, consent=Consent.NONE, principals=frozenset({"buyer"})),
        add,
    )
    return reg


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

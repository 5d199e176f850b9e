"""The idempotency key's claim (migration 0055): an advisory lock and a live-record check sent with
BEGIN, and the record written once by the execution's last statement."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs import store

from .conftest import run, staff

ADJ = {"product_id": "bouquet_roses", "delta": 2}


async def _records(database, shop, key: str) -> list:
    async with tenant_tx(database.pool, shop.id) as c:
        return await c.fetch("SELECT args_digest, envelope, audit_id FROM verb_idempotency WHERE key = $1", key)


async def _quantity(database, shop) -> int:
    async with tenant_tx(database.pool, shop.id) as c:
        return await c.fetchval("SELECT quantity FROM inventory WHERE product_id = 'bouquet_roses'")


@pytest.mark.parametrize("key", ["k'); DROP TABLE verb_idempotency; --", "k\\x27'' $1 $$", "clé 🌹 \t|verb|"])
async def test_any_key_text_is_claimed_and_replayed(shop, dispatcher, database, key):
    p = staff(shop, "employee")
    first = await run(dispatcher, p, "inventory_adjust", ADJ, confirm=True, idempotency_key=key)
    again = await run(dispatcher, p, "inventory_adjust", ADJ, confirm=True, idempotency_key=key)
    assert first["ok"] and again["replayed"]
    assert {**first, "replayed": True} == again
    [rec] = await _records(database, shop, key)
    assert rec["envelope"] == first and rec["audit_id"] == first["audit_id"]
    assert first["result"]["audit_id"] == first["audit_id"]


async def test_a_stored_envelope_keeps_the_key_order_and_text_of_the_result(shop, dispatcher, database):
    p = staff(shop, "employee")
    env = await run(dispatcher, p, "inventory_adjust", ADJ, confirm=True, idempotency_key="k-order")
    async with tenant_tx(database.pool, shop.id) as c:
        text = await c.fetchval("SELECT envelope::text FROM verb_idempotency WHERE key = 'k-order'")
    assert list(json.loads(text)) == list(env)  # json, not jsonb: written as the dispatcher built it
    assert json.loads(text) == env


async def test_an_expired_record_is_taken_over(shop, dispatcher, database, clock, db_settings):
    p = staff(shop, "employee")
    first = await run(dispatcher, p, "inventory_adjust", ADJ, confirm=True, idempotency_key="k-old")
    clock.advance(timedelta(seconds=db_settings.verbs_idempotency_ttl + 1))
    other = {"product_id": "bouquet_roses", "delta": 5}  # live, this would be a conflict
    second = await run(dispatcher, p, "inventory_adjust", other, confirm=True, idempotency_key="k-old")
    assert second["ok"] and not second.get("replayed") and second["audit_id"] != first["audit_id"]
    [rec] = await _records(database, shop, "k-old")
    assert rec["audit_id"] == second["audit_id"] and rec["envelope"] == second


async def test_a_duplicate_waits_for_the_claim_and_runs_when_the_holder_rolls_back(shop, dispatcher, database, clock):
    p = staff(shop, "employee")
    before = await _quantity(database, shop)
    claim = store.claim_sql(p.key, "inventory_adjust", "k-held", clock.now())
    held, release = asyncio.Event(), asyncio.Event()

    async def holder():
        with pytest.raises(RuntimeError):
            async with tenant_tx(database.pool, shop.id, then=claim):
                held.set()
                await release.wait()
                raise RuntimeError("roll back")  # as an execution that failed: nothing stored

    h = asyncio.create_task(holder())
    await held.wait()
    dup = asyncio.create_task(run(dispatcher, p, "inventory_adjust", ADJ, confirm=True, idempotency_key="k-held"))
    await asyncio.sleep(0.3)
    assert not dup.done()  # blocked on the claim, before its handler touched the inventory row
    release.set()
    await h
    env = await dup
    assert env["ok"] and not env.get("replayed")
    assert await _quantity(database, shop) == before + 2


async def test_a_live_record_refuses_the_claim_with_its_sqlstate(shop, dispatcher, database, clock):
    p = staff(shop, "employee")
    await run(dispatcher, p, "inventory_adjust", ADJ, confirm=True, idempotency_key="k-live")
    claim = store.claim_sql(p.key, "inventory_adjust", "k-live", clock.now())
    with pytest.raises(Exception) as exc:
        async with tenant_tx(database.pool, shop.id, then=claim):
            pass
    assert getattr(exc.value, "sqlstate", None) == store.KEY_TAKEN
    later = store.claim_sql(p.key, "inventory_adjust", "k-live", clock.now() + timedelta(days=2))
    async with tenant_tx(database.pool, shop.id, then=later):  # expired by then: free to claim
        pass


def test_claim_sql_inlines_hex_and_a_timestamp_only():
    sql = store.claim_sql("buyer:a'b", "v", "k;--", datetime.fromisoformat("2026-04-08T12:00:00+00:00"))
    assert "'b" not in sql and ";--" not in sql
    assert sql.endswith("'2026-04-08T12:00:00+00:00'::timestamptz)")
    with pytest.raises(ValueError):
        store.claim_sql("p", "v", "k", datetime(2026, 4, 8, 12))  # naive: whose noon?


def test_envelope_parts_redraw_a_placeholder_that_occurs_in_the_text(monkeypatch):
    env = {"ok": True, "audit_id": 0, "result": {"body": "x 111111111111111111 y", "audit_id": 0}}
    draws = iter([111111111111111111 - 10**17, 222222222222222222 - 10**17])
    monkeypatch.setattr(store.secrets, "randbelow", lambda n: next(draws))
    parts = store._envelope_parts(env, True)
    assert json.loads("77".join(parts)) == {**env, "audit_id": 77, "result": {**env["result"], "audit_id": 77}}
    monkeypatch.undo()
    assert json.loads("5".join(store._envelope_parts(env, False)))["result"]["audit_id"] == 0


def test_keys_are_kept_at_least_24_hours():
    """Regression (security review): ``verbs_idempotency_ttl`` allowed 3600 s, but the UCP
    operations run as verbs under it and UCP keeps a key at least 24 h (solid-verbs: 24 h)."""
    from pydantic import ValidationError

    from ucp_gateway.config import Settings

    with pytest.raises(ValidationError):
        Settings(verbs_idempotency_ttl=86399)
    assert Settings(verbs_idempotency_ttl=86400).verbs_idempotency_ttl == 86400

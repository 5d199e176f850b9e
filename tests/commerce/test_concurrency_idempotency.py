"""Idempotency (UCP checkout-rest.md) and concurrency: one order per checkout, no oversell."""

from __future__ import annotations

import asyncio

import asyncpg

from ucp_gateway.db import tenant_tx

from .conftest import SHIP_US, agent, headers, make_app, new_key, pay, payload, started, url


async def test_replay_is_byte_identical_and_mismatch_is_409(client, database):
    key = new_key()
    r1 = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=key))
    b1 = await r1.read()
    r2 = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=key))
    assert (r2.status, await r2.read()) == (r1.status, b1) == (201, b1)
    assert r2.headers.get("Idempotent-Replayed") == "true"
    r3 = await client.post(url("/checkout-sessions"), json=payload(qty=2), headers=headers(key=key))
    assert r3.status == 409 and (await r3.json())["code"] == "idempotency_key_reused"
    # another caller with the same key is a different scope
    r4 = await client.post(url("/checkout-sessions"), json=payload(qty=2), headers=headers(agent("b"), key=key))
    assert r4.status == 201


async def test_replayed_complete_is_byte_identical_and_charges_once(client, database, company):
    r = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    cid = (await r.json())["id"]
    key = new_key()
    a = await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=key))
    b = await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=key))
    assert a.status == b.status == 200, await a.text()
    assert await a.read() == await b.read()
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM payments WHERE checkout_id = $1", cid) == 1
        assert await conn.fetchval("SELECT count(*) FROM orders WHERE checkout_id = $1", cid) == 1


async def test_concurrent_duplicates_execute_once(client, database, company):
    key = new_key()
    rs = await asyncio.gather(
        *[client.post(url("/checkout-sessions"), json=payload(), headers=headers(key=key)) for _ in range(8)]
    )
    bodies = {await r.read() for r in rs}
    assert len(bodies) == 1 and {r.status for r in rs} == {201}
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM checkout_sessions") == 1


async def test_store_failure_is_503_and_leaves_nothing(client, database, company):
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        await owner.execute("REVOKE INSERT, UPDATE ON commerce_idempotency, verb_idempotency FROM ucp_app")
        r = await client.post(url("/checkout-sessions"), json=payload(), headers=headers(key=new_key()))
        assert r.status == 503 and r.headers.get("Retry-After")
        assert (await r.json())["code"] in ("idempotency_unavailable", "unavailable")
    finally:
        await owner.execute("GRANT INSERT, UPDATE ON commerce_idempotency, verb_idempotency TO ucp_app")
        await owner.close()
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM checkout_sessions") == 0


async def test_5xx_is_not_cached(client, database):
    r = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    cid = (await r.json())["id"]
    key = new_key()
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        await owner.execute("REVOKE UPDATE ON inventory FROM ucp_app")
        r = await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=key))
        assert r.status in (500, 503)
    finally:
        await owner.execute("GRANT UPDATE ON inventory TO ucp_app")
        await owner.close()
    r = await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=key))
    assert r.status == 200 and (await r.json())["status"] == "completed"


async def test_two_concurrent_completes_make_one_order(client, database, company):
    r = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    cid = (await r.json())["id"]
    rs = await asyncio.gather(
        *[
            client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=new_key()))
            for _ in range(2)
        ]
    )
    assert sorted(r.status for r in rs) == [200, 409]
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM orders") == 1
        assert await conn.fetchval("SELECT count(*) FROM payments WHERE status = 'captured'") == 1
        assert await conn.fetchval("SELECT count(*) FROM webhook_outbox") == 1


async def test_fifty_buyers_last_ten_items_never_oversell(client, database, company):
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE inventory SET quantity = 10 WHERE product_id = 'orchid_white'")
    ids = []
    for i in range(50):
        r = await client.post(
            url("/checkout-sessions"),
            json=payload("orchid_white", fulfillment=SHIP_US),
            headers=headers(agent(f"buyer{i}"), key=new_key()),
        )
        ids.append((i, (await r.json())["id"]))
    rs = await asyncio.gather(
        *[
            client.post(
                url(f"/checkout-sessions/{cid}/complete"),
                json=pay(),
                headers=headers(agent(f"buyer{i}"), key=new_key()),
            )
            for i, cid in ids
        ]
    )
    bodies = [await r.json() for r in rs]
    assert all(r.status == 200 for r in rs)
    done = [b for b in bodies if b["status"] == "completed"]
    assert len(done) == 10
    for b in bodies:
        if b["status"] != "completed":
            assert any(m["code"] == "out_of_stock" for m in b["messages"])
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT quantity FROM inventory WHERE product_id = 'orchid_white'") == 0
        assert await conn.fetchval("SELECT count(*) FROM orders") == 10
        # the order, payment and webhook of a buyer who lost the race were rolled back with the stock
        assert await conn.fetchval("SELECT count(*) FROM payments") == 10
        assert await conn.fetchval("SELECT count(*) FROM webhook_outbox") == 10


async def test_every_call_is_an_audited_buyer_verb(client, database, company):
    r = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    cid = (await r.json())["id"]
    await client.get(url(f"/checkout-sessions/{cid}"), headers=headers())
    await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=new_key()))
    async with tenant_tx(database.pool, company.id) as conn:
        rows = await conn.fetch("SELECT entry FROM verb_audit_log ORDER BY seq")
    entries = [r["entry"] for r in rows]
    assert [e["verb"] for e in entries] == ["checkout.create", "checkout.get", "checkout.complete"]
    for e in entries:
        # this client does not sign (signature policy off): its identity is the profile it claims
        assert e["principal"] == {"kind": "buyer", "subject": "unverified:" + agent(), "role": "buyer"}
        assert e["transport"] == "ucp" and e["decision"] == "allowed"
    assert "success_token" not in str(entries)  # complete's arguments are not audited


async def test_direct_path_idempotency(aiohttp_client, database, db_settings, company, platform):
    """commerce_via_verbs=false (benchmark baseline): the module's own UCP idempotency record."""
    c = await started(aiohttp_client, make_app(database, db_settings, commerce_via_verbs=False), database, company)
    key = new_key()
    rs = await asyncio.gather(
        *[c.post(url("/checkout-sessions"), json=payload(), headers=headers(key=key)) for _ in range(4)]
    )
    assert len({await r.read() for r in rs}) == 1 and {r.status for r in rs} == {201}
    r = await c.post(url("/checkout-sessions"), json=payload(qty=2), headers=headers(key=key))
    assert r.status == 409 and (await r.json())["code"] == "idempotency_key_reused"
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM checkout_sessions") == 1
        assert await conn.fetchval("SELECT count(*) FROM verb_audit_log") == 0


async def test_payment_credential_is_stored_nowhere(client, database, company):
    r = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    cid = (await r.json())["id"]
    r = await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=new_key()))
    assert (await r.json())["status"] == "completed"
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        tables = await owner.fetch(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
            "AND column_name = 'company_id' AND table_name <> 'payment_instruments'"
        )
        hits = []
        for t in {r["table_name"] for r in tables}:
            n = await owner.fetchval(f'SELECT count(*) FROM "{t}" x WHERE x::text LIKE $1', "%success_token%")
            if n:
                hits.append(t)
        for t, col in (("webhook_outbox", "payload"), ("commerce_idempotency", "body")):  # bytea columns
            n = await owner.fetchval(
                f"SELECT count(*) FROM {t} WHERE convert_from({col}, 'UTF8') LIKE $1", "%success_token%"
            )
            if n:
                hits.append(t)
        assert await owner.fetchval("SELECT token_ref FROM payments") == "demo:instr_1"
    finally:
        await owner.close()
    assert hits == []


async def test_business_profile_is_built_once_for_concurrent_requests(client, monkeypatch):
    """After the profile cache expires, concurrent requests share one build (single flight)."""
    import ucp_gateway.discovery.web as discovery_web
    from ucp_gateway.commerce.context import PROFILE_CACHE

    real, builds = discovery_web.company_profile_documents, []

    async def counting(app, company, origin):
        builds.append(origin)
        await asyncio.sleep(0.05)  # let every request arrive while the build is in flight
        return await real(app, company, origin)

    monkeypatch.setattr(discovery_web, "company_profile_documents", counting)
    client.server.app[PROFILE_CACHE].clear()
    rs = await asyncio.gather(
        *[
            client.post(url("/checkout-sessions"), json=payload(), headers=headers(agent(f"b{i}"), key=new_key()))
            for i in range(8)
        ]
    )
    assert [r.status for r in rs] == [201] * 8
    assert len(builds) == 1


async def test_a_full_business_profile_cache_evicts_its_oldest_entry_not_every_one(client):
    """At its bound the cache drops its oldest entry for a new one (it emptied itself, so past
    4,096 companies every checkout request rebuilt its profile)."""
    import time

    from ucp_gateway.commerce.context import PROFILE_CACHE, PROFILE_CACHE_MAX

    cache = client.server.app[PROFILE_CACHE]
    cache.clear()
    later = time.monotonic() + 60
    for i in range(PROFILE_CACHE_MAX):
        cache[(f"other-{i}", "https://x.example")] = (later, {"2026-04-08": {}})
    r = await client.post(url("/checkout-sessions"), json=payload(), headers=headers(agent("b0"), key=new_key()))
    assert r.status == 201
    assert len(cache) == PROFILE_CACHE_MAX
    assert ("other-0", "https://x.example") not in cache and ("other-1", "https://x.example") in cache

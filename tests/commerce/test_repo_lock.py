"""repo.lock_checkout_priced: the checkout row lock and the pricing catalogue in one statement
give what get_checkout(for_update) followed by load_catalog gave, also after a lock wait."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from ucp_gateway.commerce import repo
from ucp_gateway.db import tenant_tx


def _state(*items: str, email: str | None = None) -> dict:
    st = {"line_items": [{"id": f"li_{i}", "item": {"id": it}, "quantity": 1} for i, it in enumerate(items)]}
    if email is not None:
        st["buyer"] = {"email": email}
    return st


async def _insert(pool, company, cid: str, state: dict) -> None:
    now = datetime.now(UTC)
    async with tenant_tx(pool, company.id) as conn:
        await repo.insert_checkout(
            conn,
            company.id,
            {
                "id": cid,
                "status": "incomplete",
                "currency": "USD",
                "state": state,
                "body": {"id": cid},
                "caller": "https://agent.example/profile",
                "created_at": now,
                "expires_at": now + timedelta(hours=1),
            },
        )


async def test_lock_priced_matches_lock_then_load(database, company):
    pool = database.pool
    stored = _state("bouquet_roses", "pot_ceramic", email="John.Doe@example.com")
    await _insert(pool, company, "chk_a", stored)
    new = _state("bouquet_tulips", "bouquet_roses", "bouquet_tulips", email="nobody@example.com")  # no saved addresses
    async with tenant_tx(pool, company.id) as conn:
        row0 = await repo.get_checkout(conn, "chk_a", for_update=True)
        for state, mode in ((stored, None), (new, new)):
            want = await repo.load_catalog(
                conn,
                [li["item"]["id"] for li in state["line_items"]],
                currency="USD",
                buyer_email=(state.get("buyer") or {}).get("email"),
            )
            row, got = await repo.lock_checkout_priced(conn, "chk_a", state=mode, currency="USD")
            assert got == want
            assert len(got.saved_addresses) == (2 if mode is None else 0)
            assert set(got.products) == {li["item"]["id"] for li in state["line_items"]}
            for col in ("id", "status", "caller", "expires_at"):
                assert row[col] == row0[col]
            assert row["state"] == (row0["state"] if mode is None else None)
        assert await repo.lock_checkout_priced(conn, "chk_none", state=None, currency="USD") == (None, None)


async def test_lock_priced_after_a_lock_wait_prices_the_committed_state(database, company):
    """A writer that waited on the row lock prices the state the other writer committed."""
    pool = database.pool
    await _insert(pool, company, "chk_b", _state("bouquet_roses"))
    holder_locked, release = asyncio.Event(), asyncio.Event()

    async def holder():
        async with tenant_tx(pool, company.id) as conn:
            await repo.get_checkout(conn, "chk_b", for_update=True)
            new = _state("pot_ceramic", "bouquet_tulips")
            await conn.execute("UPDATE checkout_sessions SET state = $2 WHERE id = $1", "chk_b", new)
            holder_locked.set()
            await release.wait()

    task = asyncio.create_task(holder())
    await holder_locked.wait()

    async def waiter():
        async with tenant_tx(pool, company.id) as conn:
            return await repo.lock_checkout_priced(conn, "chk_b", state=None, currency="USD")

    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0.2)
    assert not waiting.done()  # blocked on the row lock
    release.set()
    await task
    row, catalog = await waiting
    assert [li["item"]["id"] for li in row["state"]["line_items"]] == ["pot_ceramic", "bouquet_tulips"]
    assert set(catalog.products) == {"pot_ceramic", "bouquet_tulips"}


async def test_checkout_bodies_of_a_few_kb_are_stored_uncompressed(database, company):
    """Migrations 0034/0041: rows up to a page stay in line without pglz (database CPU)."""
    pool = database.pool
    state = _state("bouquet_roses")
    now = datetime.now(UTC)
    async with tenant_tx(pool, company.id) as conn:
        await repo.insert_checkout(
            conn,
            company.id,
            {
                "id": "chk_big",
                "status": "incomplete",
                "currency": "USD",
                "state": state,
                "body": {"id": "chk_big", "pad": "x" * 4000},
                "caller": "c",
                "created_at": now,
                "expires_at": now + timedelta(hours=1),
            },
        )
        assert (
            await conn.fetchval("SELECT pg_column_compression(body) FROM checkout_sessions WHERE id = 'chk_big'")
            is None
        )
        opts = await conn.fetch(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY($1::text[]) ORDER BY relname",
            ["checkout_sessions", "commerce_idempotency", "verb_idempotency", "webhook_outbox"],
        )
    assert [(r["relname"], r["reloptions"]) for r in opts] == [
        (n, ["toast_tuple_target=8160"])
        for n in ("checkout_sessions", "commerce_idempotency", "verb_idempotency", "webhook_outbox")
    ]


async def test_complete_lock_carries_the_instruments_demo_charge_reads(database, company):
    """complete's locking read also returns the demo payment instruments; demo_charge on them
    answers exactly as when it reads them itself (one round trip less per complete)."""
    from ucp_gateway.commerce.payments import demo_charge

    pool = database.pool
    await _insert(pool, company, "chk_pay", _state("bouquet_roses"))
    async with tenant_tx(pool, company.id) as conn:
        row, _ = await repo.lock_checkout_priced(conn, "chk_pay", state=None, currency="USD")
        assert row["instruments"] and all(set(r) == {"id", "token", "handler_id"} for r in row["instruments"])
        for handler in ("mock_payment_handler", "other_handler"):
            for token in ("success_token", "fail_token", "nope", None):
                kw = {"handler_id": handler, "token": token, "amount": 100}
                assert await demo_charge(conn, **kw, instruments=row["instruments"]) == await demo_charge(conn, **kw)


async def test_no_buyer_email_leaves_out_the_addresses_subquery_with_the_same_result(database, company):
    """Without a buyer email the statements leave the saved-addresses subquery out: the catalogue
    is what the statements with it give (no addresses); with an email the subquery finds them."""
    pool = database.pool
    await _insert(pool, company, "chk_e", _state("bouquet_roses"))
    ids = ["bouquet_roses", "pot_ceramic"]
    for email, n in ((None, 0), ("John.Doe@example.com", 2), ("nobody@example.com", 0)):
        async with tenant_tx(pool, company.id) as conn:
            sent: list = []
            conn.add_query_logger(lambda q: sent.append(q.query))
            got = await repo.load_catalog(conn, ids, currency="USD", buyer_email=email)
            _, locked = await repo.lock_checkout_priced(conn, "chk_e", state=_state(*ids, email=email), currency="USD")
            # the statements with the subquery, given the same email
            full = await repo._catalog(conn, await conn.fetchrow(repo._LOAD_CATALOG, ids, email), "USD", ())
            row = await conn.fetchrow(repo._LOCK_PRICED_NO_STATE, "chk_e", True, ids, email)
            full_locked = await repo._catalog(conn, row, "USD", ())
        assert got == locked == full == full_locked and len(got.saved_addresses) == n
        left_out = email is None
        priced = [q for q in sent if "FROM products p" in q][:2]  # load_catalog's, lock_checkout_priced's
        assert [("FROM addresses" not in q) is left_out for q in priced] == [True, True], priced

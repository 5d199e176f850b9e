"""commerce.idempotency.run_idempotent (the commerce_via_verbs=false path) without savepoints:
a refusal is stored and replayed; a store failure is a 503 and nothing of the operation commits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ucp_gateway.commerce.idempotency import JSON, IdempotencyUnavailable, Stored, run_idempotent
from ucp_gateway.commerce.status import InvalidTransition
from ucp_gateway.db import tenant_tx

NOW = datetime(2026, 4, 8, 12, 0, tzinfo=UTC)


async def _run(pool, company, key: str, op) -> Stored:
    async with tenant_tx(pool, company.id) as conn:
        return await run_idempotent(
            conn,
            company_id=company.id,
            caller="https://agent.example/profile",
            key=key,
            fp=b"f" * 32,
            now=NOW,
            ttl=timedelta(hours=24),
            op=lambda: op(conn),
        )


async def test_a_refusal_is_stored_and_replayed(database, company):
    calls = []

    async def refuse(conn):
        calls.append(1)
        raise InvalidTransition("checkout chk_x is completed; update is not allowed")

    first = await _run(database.pool, company, "k-refuse", refuse)
    again = await _run(database.pool, company, "k-refuse", refuse)
    assert first.status == 409 and not first.replayed
    assert (again.status, again.body, again.replayed) == (409, first.body, True)
    assert calls == [1]


async def test_a_store_failure_is_503_and_rolls_the_operation_back(database, company):
    async def write_then_bad_record(conn):
        await conn.execute(
            "INSERT INTO products (company_id, id, title, price) VALUES ($1, 'p_idem', 't', 1)", company.id
        )
        return Stored(201, JSON + "\x00", b"{}")  # PostgreSQL text cannot hold U+0000: the record fails

    with pytest.raises(IdempotencyUnavailable):
        await _run(database.pool, company, "k-fail", write_then_bad_record)
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM products WHERE id = 'p_idem'") == 0
        assert await conn.fetchval("SELECT count(*) FROM commerce_idempotency WHERE key = 'k-fail'") == 0

"""Row-level security is enforced by PostgreSQL itself, against the application role."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from ucp_gateway.db import platform_tx, tenant_tx
from ucp_gateway.tenancy import create_company


@pytest.fixture
async def two_companies(database):
    a = await create_company(database.pool, slug="alpha", display_name="Alpha", hostnames=["alpha.example"])
    b = await create_company(database.pool, slug="bravo", display_name="Bravo", hostnames=["bravo.example"])
    for c, price in ((a, 100), (b, 200)):
        async with tenant_tx(database.pool, c.id) as conn:
            await conn.execute(
                "INSERT INTO products (company_id, id, title, price) VALUES ($1, 'p1', 'thing', $2)", c.id, price
            )
    return a, b


async def test_app_role_cannot_bypass_rls(database):
    async with database.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT rolsuper, rolbypassrls, current_user AS me FROM pg_roles WHERE rolname = current_user"
        )
        owned = await conn.fetchval(
            "SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE r.rolname = current_user"
        )
    assert row["me"] == "ucp_gateway_app"
    assert row["rolsuper"] is False and row["rolbypassrls"] is False
    assert owned == 0
    async with database.pool.acquire() as conn:
        # the migration helper that (re)defines policies is the owner's alone
        assert await conn.fetchval("SELECT has_function_privilege('tenant_table(regclass)', 'EXECUTE')") is False


async def test_select_sees_only_own_rows(database, two_companies):
    a, b = two_companies
    async with tenant_tx(database.pool, a.id) as conn:
        rows = await conn.fetch("SELECT company_id, price FROM products")
        # even an explicit filter on B's id returns nothing: RLS, not the WHERE clause, decides
        b_rows = await conn.fetch("SELECT * FROM products WHERE company_id = $1", b.id)
        subagents_b = await conn.fetch("SELECT * FROM subagents WHERE company_id = $1", b.id)
    assert [(r["company_id"], r["price"]) for r in rows] == [(a.id, 100)]
    assert b_rows == []
    assert subagents_b == []


async def test_insert_with_other_company_id_is_rejected(database, two_companies):
    a, b = two_companies
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        async with tenant_tx(database.pool, a.id) as conn:
            await conn.execute("INSERT INTO products (company_id, id, title, price) VALUES ($1, 'x', 'x', 1)", b.id)
    async with tenant_tx(database.pool, b.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM products") == 1  # nothing half-written


async def test_update_moving_row_to_other_company_is_rejected(database, two_companies):
    a, b = two_companies
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        async with tenant_tx(database.pool, a.id) as conn:
            await conn.execute("UPDATE products SET company_id = $1", b.id)
    async with tenant_tx(database.pool, a.id) as conn:
        # updating B's row from A's context touches nothing
        status = await conn.execute("UPDATE products SET price = 1 WHERE company_id = $1", b.id)
    assert status == "UPDATE 0"
    async with tenant_tx(database.pool, b.id) as conn:
        assert await conn.fetchval("SELECT price FROM products") == 200


async def test_no_tenant_context_sees_no_tenant_rows(database, two_companies):
    async with platform_tx(database.pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM products") == 0
        assert await conn.fetchval("SELECT count(*) FROM subagents") == 0
    # a bare pooled connection, never given a context, too
    async with database.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM products") == 0


async def test_context_does_not_leak_to_next_transaction(database, two_companies):
    a, _ = two_companies
    async with tenant_tx(database.pool, a.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM products") == 1
    # the same physical connection, after the transaction: app.company_id reads '' -> NULL -> no rows
    async with database.pool.acquire() as conn:
        assert await conn.fetchval("SELECT app_company_id()") is None
        assert await conn.fetchval("SELECT count(*) FROM products") == 0


async def test_company_rows_writable_only_in_own_context(database, two_companies):
    a, b = two_companies
    async with tenant_tx(database.pool, a.id) as conn:
        assert await conn.execute("UPDATE companies SET display_name = 'x' WHERE id = $1", b.id) == "UPDATE 0"
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("INSERT INTO company_hosts (hostname, company_id) VALUES ('steal.example', $1)", b.id)


async def test_every_tenant_table_has_forced_rls(database):
    """Guards future migrations: any table with company_id must have RLS enabled and forced."""
    conn = await asyncpg.connect(database.owner_dsn)
    try:
        rows = await conn.fetch(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            " (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) AS policies "
            "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace "
            "  AND a.attname = 'company_id' AND NOT a.attisdropped"
        )
    finally:
        await conn.close()
    assert rows, "expected tenant tables"
    bad = [r["relname"] for r in rows if not (r["relrowsecurity"] and r["relforcerowsecurity"] and r["policies"])]
    assert bad == []


async def test_tenant_tx_rejects_non_uuid(database):
    with pytest.raises(ValueError):
        async with tenant_tx(database.pool, "1' OR '1'='1"):
            pass
    assert uuid.UUID(str(uuid.uuid4()))


async def test_no_context_sees_no_rows_in_any_tenant_table(database, db_settings):
    """Every tenant table, filled by the demo seed and a checkout's webhook queue row, is empty
    without a tenant context; only the scoped worker transaction sees the queue."""
    from ucp_gateway.db import platform_scan_tx
    from ucp_gateway.demo import seed_demo

    report = await seed_demo(database, db_settings)
    cid = report.company.id
    async with tenant_tx(database.pool, cid) as conn:
        await conn.execute(
            "INSERT INTO webhook_queue (company_id, event_id, next_attempt_at) VALUES ($1, $2, now())",
            cid,
            uuid.uuid4(),
        )
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        tables = [
            r["relname"]
            for r in await owner.fetch(
                "SELECT DISTINCT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
                "WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace AND a.attname = 'company_id'"
            )
        ]
        filled = [t for t in tables if await owner.fetchval(f'SELECT count(*) FROM "{t}"')]
    finally:
        await owner.close()
    assert {"products", "webhook_queue", "subagents"} <= set(filled)
    # the host directory and the agent-graph directory (migration 0140) are public by design
    filled = [t for t in filled if t not in ("company_hosts", "company_directory")]
    async with platform_tx(database.pool) as conn:
        visible = {t: await conn.fetchval(f'SELECT count(*) FROM "{t}"') for t in filled}
    assert visible == dict.fromkeys(filled, 0)
    async with platform_scan_tx(database.pool, "webhook_queue") as conn:
        assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 1
        assert await conn.fetchval("SELECT count(*) FROM products") == 0  # the scan scope is one table


async def test_hot_value_checks_hold_as_domains(database):
    """Migration 0053: the checks moved from CHECK constraints to domains refuse the same values."""
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        for value, domain in (
            ("16", "audit_lane"),
            ("-1", "audit_lane"),
            ("'maybe'", "audit_decision"),
            ("'shipped'", "checkout_status"),
            ("'refunded'", "payment_status"),
            ("-1", "nonneg_minor_units"),
            ("-1", "stock_quantity"),
        ):
            with pytest.raises(asyncpg.CheckViolationError):
                await owner.fetchval(f"SELECT ({value})::{domain}")
        assert await owner.fetchval("SELECT 15::audit_lane") == 15
        assert await owner.fetchval("SELECT 'completed'::checkout_status") == "completed"
    finally:
        await owner.close()

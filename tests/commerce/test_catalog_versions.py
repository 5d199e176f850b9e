"""Migration 0052 + repo's static-parts cache: pricing reads rates, promotions and codes through
their version, so a change to any of them is seen by the next pricing (also by another replica's
cache), companies never share cached parts, and a cached version costs no extra statement."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from ucp_gateway.commerce import repo
from ucp_gateway.db import tenant_tx
from ucp_gateway.tenancy import create_company


async def _catalog(pool, company):
    async with tenant_tx(pool, company.id) as conn:
        return await repo.load_catalog(conn, ["bouquet_roses"], currency="USD", buyer_email=None)


async def _version(pool, company):
    async with tenant_tx(pool, company.id) as conn:
        return await conn.fetchval("SELECT version FROM catalog_versions")


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE shipping_rates SET price = price + 1",
        "INSERT INTO promotions (company_id, id, type, min_subtotal, description)"
        " VALUES ($1, 'promo_new', 'free_shipping', 1, 'new')",
        "DELETE FROM discounts WHERE code = (SELECT min(code) FROM discounts)",
    ],
)
async def test_every_change_is_priced_next(database, company, sql):
    pool = database.pool
    before = await _catalog(pool, company)
    v0 = await _version(pool, company)
    assert v0 is not None
    async with tenant_tx(pool, company.id) as conn:
        await conn.execute(sql, *([company.id] if "$1" in sql else []))
    v1 = await _version(pool, company)
    after = await _catalog(pool, company)
    assert v1 != v0
    assert (after.rates, after.promotions, after.discounts) != (before.rates, before.promotions, before.discounts)
    repo._STATIC_CACHE.clear()  # what an uncached read (a fresh replica) gives
    assert await _catalog(pool, company) == after


async def test_a_rolled_back_change_keeps_the_version(database, company):
    pool = database.pool
    v0 = await _version(pool, company)
    with pytest.raises(RuntimeError):
        async with tenant_tx(pool, company.id) as conn:
            await conn.execute("UPDATE shipping_rates SET price = price + 1")
            raise RuntimeError("abort")
    assert await _version(pool, company) == v0


async def test_cached_version_costs_one_statement(database, company):
    pool = database.pool
    await _catalog(pool, company)  # cached now
    async with tenant_tx(pool, company.id) as conn:
        sent = []
        conn.add_query_logger(lambda q: sent.append(q.query))
        await repo.load_catalog(conn, ["bouquet_roses"], currency="USD", buyer_email=None)
    assert [q for q in sent if not q.startswith("COMMIT")] == [repo._LOAD_CATALOG_NO_EMAIL]


async def test_companies_never_share_cached_parts(database, company):
    pool = database.pool
    other = await create_company(pool, slug="other-shop", display_name="Other", hostnames=["other.example"])
    async with tenant_tx(pool, other.id) as conn:
        await conn.execute(
            "INSERT INTO shipping_rates (company_id, id, country_code, service_level, price, title)"
            " VALUES ($1, 'r_other', 'default', 'standard', 5, 'Other rate')",
            other.id,
        )
    mine, theirs = await _catalog(pool, company), await _catalog(pool, other)
    assert [r.id for r in theirs.rates] == ["r_other"] and theirs.promotions == () and theirs.discounts == {}
    assert "r_other" not in [r.id for r in mine.rates] and mine.rates
    assert await _version(pool, company) != await _version(pool, other)


async def test_company_without_version_is_read_in_full(database, company):
    pool = database.pool
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        async with owner.transaction():  # the owner is bound by the forced row-level security too
            await owner.execute("SELECT set_config('app.company_id', $1, true)", str(company.id))
            assert await owner.execute("DELETE FROM catalog_versions") == "DELETE 1"
    finally:
        await owner.close()
    async with tenant_tx(pool, company.id) as conn:
        sent = []
        conn.add_query_logger(lambda q: sent.append(q.query))
        got = await repo.load_catalog(conn, ["bouquet_roses"], currency="USD", buyer_email=None)
        await asyncio.sleep(0.05)  # query loggers run after the query
        assert len(sent) == 2 and got.rates
        await repo.load_catalog(conn, ["bouquet_roses"], currency="USD", buyer_email=None)
        await asyncio.sleep(0.05)
        assert len(sent) == 4  # nothing cached without a version


async def test_truncate_is_refused(database, company):
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        for t in ("shipping_rates", "promotions", "discounts"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await owner.execute(f"TRUNCATE {t}")
    finally:
        await owner.close()

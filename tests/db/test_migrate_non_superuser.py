"""An operator whose DATABASE_URL user is no superuser (it may create databases and roles, as the
README asks; a managed PostgreSQL gives no more) migrates a fresh cluster of its own: every
migration applies, ``ts_match_vq`` is left as PostgreSQL ships it (migration 0067 marks it LEAKPROOF
only for a superuser), and catalogue search is correct and isolated between companies, only not
through the GIN index (the first search logs ``catalog_search_without_gin_index`` with the fix)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from structlog.testing import capture_logs

from ucp_gateway.commerce import catalog_search, catalog_service
from ucp_gateway.commerce.catalog_api import parse_search
from ucp_gateway.config import Settings
from ucp_gateway.db import tenant_tx
from ucp_gateway.db.database import connect_database
from ucp_gateway.db.dsn import with_database, with_user
from ucp_gateway.db.embedded import start_embedded, stop_embedded
from ucp_gateway.tenancy import create_company

from ..commerce.test_catalog_search import ctx_for


@pytest.fixture
async def operator_dsn(tmp_path):
    """A cluster of its own (the shared test cluster's roles belong to its superuser) and a DSN of
    a LOGIN CREATEDB CREATEROLE role that is no superuser, for a database it creates itself."""
    server, dsn = await start_embedded(tmp_path / "cluster")
    try:
        su = await asyncpg.connect(dsn)
        try:
            await su.execute("CREATE ROLE operator LOGIN CREATEDB CREATEROLE NOSUPERUSER NOBYPASSRLS")
        finally:
            await su.close()
        name = f"shop_{uuid.uuid4().hex[:8]}"
        op = await asyncpg.connect(with_user(dsn, "operator"))
        try:
            await op.execute(f'CREATE DATABASE "{name}"')  # the operator's own database
        finally:
            await op.close()
        yield with_database(with_user(dsn, "operator"), name)
    finally:
        await stop_embedded(server)


async def _rows(conn, company, body):
    return await catalog_search.search_rows(conn, parse_search(body, shop_currency="USD"))


async def test_a_non_superuser_migrates_and_search_stays_correct_and_isolated(operator_dsn, tmp_path):
    settings = Settings(database_url=operator_dsn, data_dir=tmp_path / "data", environment="development",
                        log_level="warning")  # fmt: skip
    db = await connect_database(settings)  # creates the database and the app role, applies every migration
    try:
        owner = await asyncpg.connect(operator_dsn)
        try:
            assert await owner.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
            assert await owner.fetchval("SELECT proleakproof FROM pg_proc WHERE proname = 'ts_match_vq'") is False
        finally:
            await owner.close()
        a = await create_company(db.pool, slug="alpha", display_name="Alpha", hostnames=["alpha.example"])
        b = await create_company(db.pool, slug="bravo", display_name="Bravo", hostnames=["bravo.example"])
        for c, title in ((a, "Red roses"), (b, "Red tulips")):
            async with tenant_tx(db.pool, c.id) as conn:
                await conn.execute(
                    "INSERT INTO catalog_products (company_id, id, handle, title) VALUES ($1, 'p1', 'p1', $2)",
                    c.id,
                    title,
                )
                await conn.execute(
                    "INSERT INTO products (company_id, id, product_id, title, price) VALUES ($1, 'v1', 'p1', $2, 500)",
                    c.id,
                    title,
                )
        catalog_service._TRGM.clear()  # the process's first search in this database asks what it offers
        async with tenant_tx(db.pool, a.id) as conn:
            with capture_logs() as logs:
                found = (await catalog_service.search(conn, ctx_for(a), {"query": "red"})).body["products"]
            assert [e["event"] for e in logs] == ["catalog_search_without_gin_index"]
            assert "ALTER FUNCTION ts_match_vq" in logs[0]["fix"]
            assert [p["title"] for p in found] == ["Red roses"]  # never bravo's red tulips
            assert await _rows(conn, a, {"query": "tulips"}) == []
            plan = "\n".join(
                r[0]
                for r in await conn.fetch(
                    "EXPLAIN SELECT id FROM catalog_products WHERE search @@ websearch_to_tsquery('english', 'red')"
                )
            )
            # the non-LEAKPROOF match runs after the tenant policy: a filter, never a GIN condition
            assert "catalog_products_search" not in plan
    finally:
        catalog_service._TRGM.clear()  # the next test's database is another one
        await db.close()

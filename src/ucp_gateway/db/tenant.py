"""Units of work in a tenant context.

Row-level security policies read ``app_company_id()`` (migration 0001), which is
``NULLIF(current_setting('app.company_id', true), '')::uuid``. ``SET LOCAL`` (via ``set_config(...,
true)``) scopes the setting to the transaction, so a pooled connection never carries one tenant's
context into the next unit of work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from uuid import UUID

import asyncpg

__all__ = ["platform_scan_tx", "platform_tx", "tenant_tx"]


@asynccontextmanager
async def tenant_tx(
    pool: asyncpg.Pool, company_id: UUID | str, *, isolation: str = "read_committed"
) -> AsyncIterator[asyncpg.Connection]:
    """Run one transaction as company ``company_id``; RLS shows and accepts only its rows.

    Args:
        pool: the application-role pool (never the owner pool: the owner bypasses nothing, but
            the point is that the app role cannot).
        company_id: the tenant's UUID.
        isolation: asyncpg isolation level name.
    Yields: the connection, inside an open transaction. Commits on normal exit, rolls back on error.
    """
    cid = str(UUID(str(company_id)))  # validates; never interpolated into SQL
    async with pool.acquire() as conn, conn.transaction(isolation=isolation):
        await conn.execute("SELECT set_config('app.company_id', $1, true)", cid)
        yield conn


@asynccontextmanager
async def platform_tx(pool: asyncpg.Pool, *, isolation: str = "read_committed") -> AsyncIterator[asyncpg.Connection]:
    """One transaction with no tenant context: tenant tables show no rows; platform tables are open."""
    async with pool.acquire() as conn, conn.transaction(isolation=isolation):
        await conn.execute("SELECT set_config('app.company_id', '', true)")
        yield conn


@asynccontextmanager
async def platform_scan_tx(pool: asyncpg.Pool, scope: str) -> AsyncIterator[asyncpg.Connection]:
    """A platform transaction that may see every tenant's rows of the tables whose policy names
    ``scope`` (``current_setting('app.platform_scan') = scope``), e.g. ``"webhook_queue"`` for the
    delivery worker. Cross-tenant access is thus explicit and scoped to one table; a transaction
    with no context at all still sees no tenant rows.
    """
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "SELECT set_config('app.company_id', '', true), set_config('app.platform_scan', $1, true)", scope
        )
        yield conn

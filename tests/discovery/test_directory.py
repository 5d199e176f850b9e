"""The agent-graph directory (migration 0140): one row per company with its slug, name, listing and
first hostname, kept right by triggers for every write the app role makes in a company's tenant
context, and read by a page as a plain range of its index; the pages' single-flight cache."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.discovery.graph import DirectoryPages, page_json
from ucp_gateway.tenancy import create_company, list_companies

HEAD, TAIL = "https://", "/.well-known/ucp"


async def _directory(pool) -> list[tuple]:
    rows = await pool.fetch("SELECT slug, name, listing, host FROM company_directory ORDER BY slug")
    return [tuple(r) for r in rows]


async def _from_companies(pool) -> list[tuple]:
    """What the directory must hold, read from companies and company_hosts themselves."""
    companies = await list_companies(pool, limit=1000)
    listing = {
        r[0]: r[1] for r in await pool.fetch("SELECT slug, settings -> 'platform_listing' FROM companies ORDER BY slug")
    }
    return [(c.slug, c.display_name, listing[c.slug], c.hostnames[0] if c.hostnames else None) for c in companies]


async def test_the_directory_follows_every_write_of_the_app_role(database):
    pool = database.pool  # the application role: RLS forced, no bypass
    a = await create_company(pool, slug="acme", display_name="Acme", hostnames=["zz.acme.example", "acme.example"])
    b = await create_company(pool, slug="bolt", display_name="Bolt")
    assert await _directory(pool) == [("acme", "Acme", None, "acme.example"), ("bolt", "Bolt", None, None)]
    async with tenant_tx(pool, b.id) as conn:
        await conn.execute("INSERT INTO company_hosts VALUES ('bolt.example', $1), ('a.bolt.example', $1)", b.id)
    async with tenant_tx(pool, a.id) as conn:
        await conn.execute("DELETE FROM company_hosts WHERE hostname = 'acme.example'")
        await conn.execute(
            """UPDATE companies SET display_name = 'Acme "Inc"', settings = '{"platform_listing": false}'"""
            " WHERE id = $1",
            a.id,
        )
    assert await _directory(pool) == [
        ("acme", 'Acme "Inc"', False, "zz.acme.example"),
        ("bolt", "Bolt", None, "a.bolt.example"),
    ]
    async with tenant_tx(pool, b.id) as conn:
        await conn.execute("UPDATE company_hosts SET hostname = '0.bolt.example' WHERE hostname = 'bolt.example'")
        await conn.execute("UPDATE companies SET slug = 'bolt-2' WHERE id = $1", b.id)
        # another company's row is not the app's to write, not even through the directory
        assert await conn.execute("UPDATE company_directory SET name = 'x' WHERE company_id = $1", a.id) == "UPDATE 0"
    with pytest.raises(asyncpg.InsufficientPrivilegeError):  # the row policy's check
        async with tenant_tx(pool, b.id) as conn:
            await conn.execute("INSERT INTO company_directory VALUES ($1, 'x', 'x', NULL, NULL)", a.id)
    async with tenant_tx(pool, a.id) as conn:
        await conn.execute("DELETE FROM company_hosts WHERE company_id = $1", a.id)
    assert await _directory(pool) == await _from_companies(pool)
    assert await _directory(pool) == [("acme", 'Acme "Inc"', False, None), ("bolt-2", "Bolt", None, "0.bolt.example")]
    async with tenant_tx(pool, b.id) as conn:
        await conn.execute("DELETE FROM companies WHERE id = $1", b.id)  # its hosts and its row go with it
    assert await _directory(pool) == [("acme", 'Acme "Inc"', False, None)]
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await pool.execute("TRUNCATE company_hosts")  # not the app's; the owner's is refused (no row trigger)
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        with pytest.raises(asyncpg.RaiseError, match="agent-graph directory"):
            await owner.execute("TRUNCATE company_hosts")
    finally:
        await owner.close()


async def test_a_page_lists_what_the_directory_holds_in_slug_order(database):
    pool = database.pool
    for i in (3, 1, 2):
        await create_company(
            pool, slug=f"co-{i}", display_name=f"Co {i}", hostnames=[f"b.co{i}.example", f"a.co{i}.example"]
        )
    await create_company(pool, slug="co-4", display_name="Co 4", settings={"platform_listing": False})
    companies, more, last = await page_json(pool, None, 2, HEAD, TAIL)
    assert (more, last) == (True, "co-2")
    assert companies == (
        '{"slug":"co-1","name":"Co 1","profile":"https://a.co1.example/.well-known/ucp"},'
        '{"slug":"co-2","name":"Co 2","profile":"https://a.co2.example/.well-known/ucp"}'
    )
    companies, more, last = await page_json(pool, "co-2", 2, HEAD, TAIL)
    assert (companies, more, last) == (
        '{"slug":"co-3","name":"Co 3","profile":"https://a.co3.example/.well-known/ucp"}',
        False,
        "co-4",
    )


class Gate:
    """A pool stand-in whose page reads wait for ``open`` and count themselves."""

    def __init__(self, pool):
        self.pool, self.reads, self.open = pool, 0, asyncio.Event()

    async def fetchrow(self, *args):
        self.reads += 1
        await self.open.wait()
        return await self.pool.fetchrow(*args)


async def test_pages_are_read_once_for_all_waiters_ahead_on_request_and_cancelled_at_close(database):
    for i in range(3):
        await create_company(database.pool, slug=f"co-{i}", display_name=f"Co {i}", hostnames=[f"co{i}.example"])
    gate = Gate(database.pool)
    pages = DirectoryPages(ttl=60)
    first = [asyncio.ensure_future(pages.get(gate, None, 2, HEAD, TAIL, "p", ahead=True)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert gate.reads == 1  # three waiters, one read
    first[0].cancel()  # one waiter gone: the read goes on for the others
    gate.open.set()
    bodies = await asyncio.gather(*first[1:])
    assert bodies[0] == bodies[1] and b'"next":"p?cursor=' in bodies[0][0]
    await asyncio.sleep(0.05)
    assert gate.reads == 2  # the next page, read ahead
    await pages.get(gate, None, 2, HEAD, TAIL, "p")
    assert gate.reads == 2  # both cached
    gate.open.clear()
    stuck = DirectoryPages(ttl=60)
    waiter = asyncio.ensure_future(stuck.get(gate, None, 2, HEAD, TAIL, "p"))
    await asyncio.sleep(0.01)
    await stuck.close()  # at cleanup: the read on its way is cancelled
    with pytest.raises(asyncio.CancelledError):
        await waiter

"""db.tenant's unit of work as one async context manager object (_Unit) gives what the generator
form it replaced gives (the reference below): commit, rollback, the first statement's failure,
the COMMIT probe, the connection back in the pool, and a malformed company id."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from uuid import UUID

import asyncpg
import pytest

from ucp_gateway.db import tenant as tenant_mod
from ucp_gateway.db.tenant import COMMIT_PROBE, CommitProbe, tenant_tx
from ucp_gateway.tenancy import create_company


@asynccontextmanager
async def _reference_unit(pool, fused, sql, args, isolation, then=None) -> AsyncIterator[asyncpg.Connection]:
    """The generator form of db.tenant._unit (before _Unit)."""
    async with pool.acquire() as conn:
        after = getattr(conn, "after_begin", None) if fused is not None else None
        if after is not None:
            after(fused if then is None else f"{fused}; {then}")
        probe, sent = COMMIT_PROBE.get(), False
        if probe is not None:
            probe.status = None
        try:
            async with conn.transaction(isolation=isolation):
                if after is None or not conn.begin_consumed():
                    if after is not None:
                        after(None)
                    await conn.execute(sql, *args)
                    if then is not None:
                        await conn.execute(then)
                yield conn
                sent = probe is not None and probe.armed and after is not None
                if sent:
                    conn.after_commit(probe.sql)
            if sent:
                probe.status = conn.commit_status()
        finally:
            if after is not None:
                after(None)
                conn.after_commit(None)


@asynccontextmanager
async def _reference_tenant_tx(pool, company_id, *, isolation="read_committed", then=None):
    cid = str(UUID(str(company_id)))
    fused = f"SELECT set_config('app.company_id', '{cid}', true)"
    sql = "SELECT set_config('app.company_id', $1, true)"
    async with _reference_unit(pool, fused, sql, (cid,), isolation, then) as c:
        yield c


async def _scenario(tx, db, company) -> list:
    """Run the unit through its cases; return what can be observed of each."""
    pool, out = db.pool, []
    insert = "INSERT INTO products (company_id, id, title, price) VALUES ($1, $2, 't', 1)"
    # commit, with an armed probe: the probe's answer comes back in the COMMIT round trip
    probe = CommitProbe("SELECT 1")
    probe.armed = True
    token = COMMIT_PROBE.set(probe)
    try:
        async with tx(pool, company.id) as conn:
            await conn.execute(insert, company.id, "a")
            out.append(await conn.fetchval("SELECT current_setting('app.company_id')"))
        out.append(probe.status)
        # an unarmed probe is cleared and stays None
        probe.armed = False
        async with tx(pool, company.id) as conn:
            pass
        out.append(probe.status)
    finally:
        COMMIT_PROBE.reset(token)
    # a body that raises: rolled back, the same exception, nothing left on the connection
    for exc in (RuntimeError("boom"), KeyError("k")):
        try:
            async with tx(pool, company.id) as conn:
                await conn.execute(insert, company.id, "b")
                raise exc
        except type(exc) as got:
            out.append(repr(got))
    # a failing first statement (then=): raised on entry, the body never runs
    ran = False
    try:
        async with tx(pool, company.id, then="SELECT 1/0") as conn:
            ran = True
    except asyncpg.DivisionByZeroError as got:
        out.append(type(got).__name__)
    out.append(ran)
    # a database error in the body: the transaction is rolled back
    try:
        async with tx(pool, company.id) as conn:
            await conn.execute(insert, company.id, "a")  # duplicate key
    except asyncpg.UniqueViolationError as got:
        out.append(type(got).__name__)
    # the committed rows, and the one connection back in the pool without context
    async with tx(pool, company.id) as conn:
        out.append(await conn.fetch("SELECT id FROM products ORDER BY id"))
        await conn.execute("DELETE FROM products")
    async with pool.acquire() as conn:
        out.append(await conn.fetchval("SELECT current_setting('app.company_id', true)") or "")
        out.append(conn.is_in_transaction())
    # a malformed company id: ValueError
    for bad in ("not-a-uuid", 42):
        with pytest.raises(ValueError) as info:
            async with tx(pool, bad):
                pass
        out.append(str(info.value))
    return out


async def test_unit_object_gives_what_the_generator_form_gives(one_conn_db):
    company = await create_company(one_conn_db.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    got = await _scenario(tenant_tx, one_conn_db, company)
    want = await _scenario(_reference_tenant_tx, one_conn_db, company)
    assert got == want
    assert got[1] == "SELECT 1" and got[2] is None and [r["id"] for r in got[-5]] == ["a"]


async def test_company_id_text_is_remembered_per_uuid_only_after_validation(one_conn_db):
    company = await create_company(one_conn_db.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    tenant_mod._CID_SQL.clear()
    async with tenant_tx(one_conn_db.pool, str(company.id)) as conn:  # text ids are validated, not remembered
        assert await conn.fetchval("SELECT app_company_id()") == company.id
    assert tenant_mod._CID_SQL == {}
    async with tenant_tx(one_conn_db.pool, company.id) as conn:
        assert await conn.fetchval("SELECT app_company_id()") == company.id
    assert tenant_mod._CID_SQL[company.id] == (
        str(company.id),
        f"SELECT set_config('app.company_id', '{company.id}', true)",
    )

"""The pool skips asyncpg's server reset only when no session state can remain (db/connection.py),
and tenant_tx sets the tenant context in the round trip of BEGIN (db/tenant.py)."""

from __future__ import annotations

import asyncio
import re
import uuid

import asyncpg
import pytest

from ucp_gateway.db import connection as connection_mod
from ucp_gateway.db import platform_scan_tx, platform_tx, tenant_tx
from ucp_gateway.db.connection import GatewayConnection, leaves_session_state
from ucp_gateway.tenancy import create_company
from ucp_gateway.verbs.reads import tenant_conn

RESET_QUERY = "SELECT pg_advisory_unlock_all();"

CLEAN = [
    "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT set_config('app.company_id', "
    "'6d1f0f6e-0000-4000-8000-000000000000', true)",
    "SELECT set_config('app.company_id', $1, true)",
    "SELECT set_config('app.company_id', '', true), set_config('app.platform_scan', $1, true)",
    "SELECT set_config('a', format('%s,%s', 1, ')'), true)",
    "BEGIN; SELECT set_config('app.company_id', 'x', true), set_config('synchronous_commit', 'off', true)",
    "INSERT INTO t AS i VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 1 RETURNING true",
    "UPDATE checkout_sessions SET status = $2 WHERE id = $1",
    "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
    "SET LOCAL session_replication_role = replica",
    "COMMIT;",
    "SAVEPOINT __asyncpg_savepoint_1__;",
]
SESSION = [
    "SET search_path = x",
    "  set application_name to 'x'",
    "/* why */ SET statement_timeout = 0",
    "BEGIN; SET statement_timeout = 0",
    "SELECT 1; set role ucp_app",
    "SET SESSION AUTHORIZATION DEFAULT",
    "RESET ALL",
    "SELECT set_config('app.company_id', $1, false)",
    "SELECT set_config('app.company_id', $1, $2)",
    "SELECT pg_catalog.set_config('a', 'b', false)",
    "SELECT \"set_config\"('a', 'b', false)",
    "SELECT set_config('a', 'b', true), set_config('c', 'd', false)",
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_try_advisory_lock($1)",
    "SELECT pg_advisory_lock_shared(1, 2)",
    'LISTEN "chan"',
    "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
    "PREPARE p AS SELECT 1",
    "CREATE TEMP TABLE t (a int)",
    "CREATE TEMPORARY TABLE t (a int)",
    "DO $$ BEGIN PERFORM set_config('a', 'b', false); END $$",
    "DISCARD ALL",
    "LOAD 'auto_explain'",
]


@pytest.mark.parametrize("sql", CLEAN)
def test_transaction_scoped_statements_need_no_reset(sql):
    assert leaves_session_state(sql) is False


@pytest.mark.parametrize("sql", SESSION)
def test_session_statements_are_recognised(sql):
    assert leaves_session_state(sql) is True


def _reference_classify(sql: str) -> bool:
    """The classifier as plain regexes (before its prefilters and the fast set_config path)."""
    text = re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S)
    if re.search(r"pg_(?:try_)?advisory_lock|\bLISTEN\b|\bWITH\s+HOLD\b|\bTEMP(?:ORARY)?\b", text, re.I):
        return True
    for m in re.finditer(r"(?:^|;)\s*(?:SET|RESET|LISTEN|UNLISTEN|DECLARE|PREPARE|DO|DISCARD|LOAD)\b", text, re.I):
        if not re.compile(r"(?:^|;)\s*SET\s+LOCAL\b", re.I).match(text, m.start()):
            return True
    return any(
        not connection_mod._parse_set_config_is_local(text, m.end())
        for m in re.finditer(r"set_config\"?\s*\(", text, re.I)
    )


_PIECES = [
    "SELECT set_config('app.company_id', '6d1f0f6e-0000-4000-8000-000000000000', true)",
    "SELECT set_config('a', $1, TRUE )",
    "SELECT set_config('a', 'b', false)",
    "SELECT set_config('a', format('%s', ')'), true)",
    "SELECT SET_CONFIG ( 'a' , 'b' , true )",
    "SELECT \"set_config\"('a', 'b', true)",
    "SELECT set_config('a;b', 'c', true)",
    "SELECT verb_idempotency_claim(decode('6275', 'hex'), '2026-11-30T18:33:18+00:00'::timestamptz)",
    "BEGIN ISOLATION LEVEL READ COMMITTED",
    "SET LOCAL x = 1",
    "set   local x = 1",
    "SET x = 1",
    " reset all",
    "SELECT 'temp'",
    "SELECT tempo FROM t",
    "SELECT pg_advisory_xact_lock(1)",
    "SELECT PG_ADVISORY_LOCK(1)",
    "listen x",
    "SELECT 'listening'",
    "DECLARE c CURSOR WITH  HOLD FOR SELECT 1",
    "SELECT 1 /* SET x */",
    "SELECT 1 -- LISTEN x",
    "SELECT 'ünïcode', 'İ' , set_config('a', 'b', true)",
    "do $$ $$",
    "SELECT 'x' AS done",
    "SELECT 1 WITH HOLD",
    "SELECT x listen",
    "SELECT set_config('a'', 'b', true)",
    "SELECT set_config('a', 'b, true)",
]


def test_fast_classifier_gives_the_reference_verdict():
    """Every join of up to three pieces, in both cases: the prefilters change speed, not verdicts."""
    import itertools

    texts = ["", *_PIECES]
    texts += ["; ".join(c) for c in itertools.permutations(_PIECES, 2)]
    texts += [";".join(c) for c in itertools.combinations(_PIECES, 3)]
    texts += [t.upper() for t in texts] + [t.swapcase() for t in texts]
    assert len(texts) > 8000
    wrong = [t for t in texts if connection_mod._classify(t) != _reference_classify(t)]
    assert wrong == []
    assert {_reference_classify(t) for t in texts} == {True, False}


@pytest.fixture
async def owner(db_settings):
    conn = await asyncpg.connect(db_settings.database_url)
    try:
        yield conn
    finally:
        await conn.close()


async def _last_query(owner: asyncpg.Connection, pid: int, state: str = "idle") -> str:
    """The last statement the backend ``pid`` ran (pg_stat_activity), once it is in ``state``."""
    for _ in range(100):
        row = await owner.fetchrow("SELECT state, query FROM pg_stat_activity WHERE pid = $1", pid)
        if row["state"] == state:
            return row["query"]
        await asyncio.sleep(0.01)
    raise AssertionError(f"backend did not become {state}")


async def _context_of_next(db) -> tuple[str | None, bool]:
    async with db.pool.acquire() as conn:
        return await conn.fetchval("SELECT current_setting('app.company_id', true)"), conn.is_in_transaction()


async def test_pool_uses_gateway_connections(one_conn_db):
    async with one_conn_db.pool.acquire() as conn:
        assert isinstance(conn._con, GatewayConnection)


async def test_tenant_tx_sets_context_with_begin_and_skips_the_reset(one_conn_db, owner):
    company = await create_company(one_conn_db.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    async with tenant_tx(one_conn_db.pool, company.id) as conn:
        pid = conn.get_server_pid()
        assert await conn.fetchval("SELECT current_setting('app.company_id')") == str(company.id)
        assert await conn.fetchval("SELECT app_company_id()") == company.id
    assert await _last_query(owner, pid) == "COMMIT;"  # no reset round trip after the commit
    assert await _context_of_next(one_conn_db) in (("", False), (None, False))


async def test_tenant_context_is_in_the_begin_round_trip(one_conn_db, owner):
    company = await create_company(one_conn_db.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    async with tenant_tx(one_conn_db.pool, company.id) as conn:
        pid = conn.get_server_pid()
        query = await _last_query(owner, pid, "idle in transaction")
    assert re.fullmatch(
        rf"BEGIN ISOLATION LEVEL READ COMMITTED; SELECT set_config\('app.company_id', '{company.id}', true\)", query
    )


async def test_savepoints_still_nest_in_a_tenant_tx(one_conn_db):
    company = await create_company(one_conn_db.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    async with tenant_tx(one_conn_db.pool, company.id) as conn:
        with pytest.raises(asyncpg.UniqueViolationError):
            async with conn.transaction():
                for _ in range(2):
                    await conn.execute(
                        "INSERT INTO products (company_id, id, title, price) VALUES ($1, 'p', 't', 1)", company.id
                    )
        assert await conn.fetchval("SELECT count(*) FROM products") == 0
        assert await conn.fetchval("SELECT current_setting('app.company_id')") == str(company.id)


async def test_failed_tenant_tx_rolls_back_and_leaves_no_context(one_conn_db):
    company = await create_company(one_conn_db.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    with pytest.raises(RuntimeError):
        async with tenant_tx(one_conn_db.pool, company.id) as conn:
            await conn.execute(
                "INSERT INTO products (company_id, id, title, price) VALUES ($1, 'p', 't', 1)", company.id
            )
            raise RuntimeError("boom")
    assert await _context_of_next(one_conn_db) in (("", False), (None, False))
    async with tenant_tx(one_conn_db.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM products") == 0


async def test_platform_transactions_set_their_context(one_conn_db):
    async with platform_tx(one_conn_db.pool) as conn:
        assert await conn.fetchval("SELECT current_setting('app.company_id')") == ""
    for scope in ("webhook_queue", "Not a scope; --"):  # the second is sent as a parameter, never inlined
        async with platform_scan_tx(one_conn_db.pool, scope) as conn:
            assert await conn.fetchval("SELECT current_setting('app.platform_scan')") == scope
    async with one_conn_db.pool.acquire() as conn:
        assert await conn.fetchval("SELECT current_setting('app.platform_scan', true)") in ("", None)


async def test_session_setting_is_reset_before_the_next_acquirer(one_conn_db, owner):
    cid = str(uuid.uuid4())
    async with one_conn_db.pool.acquire() as conn:
        pid = conn.get_server_pid()
        await conn.execute("SELECT set_config('app.company_id', $1, false)", cid)
    assert (await _last_query(owner, pid)).startswith(RESET_QUERY)
    assert await _context_of_next(one_conn_db) == ("", False)


async def test_session_advisory_lock_is_released_with_the_connection(one_conn_db, owner):
    async with one_conn_db.pool.acquire() as conn:
        assert await conn.fetchval("SELECT pg_try_advisory_lock(4242)")
    assert await owner.fetchval("SELECT pg_try_advisory_lock(4242)")  # free again: the reset ran
    await owner.execute("SELECT pg_advisory_unlock(4242)")


@pytest.mark.filterwarnings("ignore:.*active notification listener")
async def test_listen_is_undone_with_the_connection(one_conn_db):
    async with one_conn_db.pool.acquire() as conn:
        await conn.add_listener("chan", lambda *a: None)
    async with one_conn_db.pool.acquire() as conn:
        assert await conn.fetch("SELECT pg_listening_channels()") == []


async def test_connection_released_mid_transaction_is_rolled_back(one_conn_db):
    company = await create_company(one_conn_db.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    cid = str(company.id)
    async with one_conn_db.pool.acquire() as conn:
        # a manual transaction with a local tenant context, never committed
        await conn.execute(f"BEGIN; SELECT set_config('app.company_id', '{cid}', true)")
        await conn.execute("INSERT INTO products (company_id, id, title, price) VALUES ($1, 'p', 't', 1)", company.id)
        assert conn.is_in_transaction()
    assert await _context_of_next(one_conn_db) in (("", False), (None, False))
    async with tenant_tx(one_conn_db.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM products") == 0


async def test_read_group_transaction_skips_the_reset(one_conn_db, owner):
    company = await create_company(one_conn_db.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    async with tenant_conn(one_conn_db.pool, company.id, durable=False) as conn:
        pid = conn.get_server_pid()
        assert await conn.fetchval("SELECT current_setting('app.company_id')") == str(company.id)
    assert await _last_query(owner, pid) == "COMMIT"
    assert await _context_of_next(one_conn_db) in (("", False), (None, False))


async def test_no_function_of_ours_sets_session_state(owner):
    """Server-side code is not scanned at release: the functions the application role may call
    must keep to transaction scope."""
    rows = await owner.fetch(
        "SELECT p.proname, p.prosrc FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'"
        " AND has_function_privilege('ucp_app', p.oid, 'EXECUTE')"
    )
    assert rows
    bad = re.compile(
        r"pg_(?:try_)?advisory_lock|\bLISTEN\b|\bWITH\s+HOLD\b|\bTEMP(?:ORARY)?\b|\bEXECUTE\b"
        r"|(?:^|;)\s*(?:SET|RESET|DISCARD)\b(?!\s+LOCAL)",
        re.I | re.M,
    )
    offenders = [r["proname"] for r in rows if bad.search(r["prosrc"])]
    offenders += [
        r["proname"]
        for r in rows
        if "set_config" in r["prosrc"]
        and leaves_session_state(re.sub(r"(?is)^\s*DECLARE\b.*?\bBEGIN\b", "", r["prosrc"]))
    ]
    assert offenders == []

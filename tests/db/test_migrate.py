"""Migration runner: order, checksums, concurrency."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from ucp_gateway.db.migrate import MigrationError, apply_migrations, available_migrations, migration_status

from ..conftest import _drop_db, _new_db


async def _empty_db(pg_base_dsn):
    name = f"ucpgw_m_{id(object())}"
    conn = await asyncpg.connect(pg_base_dsn)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    from ucp_gateway.db.dsn import with_database

    return name, with_database(pg_base_dsn, name)


def test_shipped_migrations_are_ordered_and_named():
    ms = available_migrations()
    assert [m.version for m in ms] == sorted(m.version for m in ms)
    assert ms[0].name == "0001_tenancy.sql"
    assert all(len(m.checksum) == 64 for m in ms)


async def test_apply_records_every_file_once(pg_base_dsn):
    name, dsn = await _empty_db(pg_base_dsn)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            applied = await apply_migrations(conn)
            assert applied == [m.name for m in available_migrations()]
            assert await apply_migrations(conn) == []  # second run: nothing to do
            rows = await conn.fetch("SELECT version, checksum FROM schema_migrations ORDER BY version")
            assert [(r["version"], r["checksum"]) for r in rows] == [
                (m.version, m.checksum) for m in available_migrations()
            ]
        finally:
            await conn.close()
    finally:
        await _drop_db(pg_base_dsn, name)


async def test_concurrent_gateways_apply_each_migration_once(pg_base_dsn):
    name, dsn = await _empty_db(pg_base_dsn)
    try:
        conns = [await asyncpg.connect(dsn) for _ in range(3)]
        try:
            results = await asyncio.gather(*(apply_migrations(c) for c in conns))
        finally:
            for c in conns:
                await c.close()
        applied = [n for r in results for n in r]
        assert sorted(applied) == sorted(m.name for m in available_migrations())  # each exactly once
    finally:
        await _drop_db(pg_base_dsn, name)


async def test_changed_applied_migration_is_a_hard_error(pg_base_dsn, template_db):
    name = await _new_db(pg_base_dsn, template_db)
    from ucp_gateway.db.dsn import with_database

    conn = await asyncpg.connect(with_database(pg_base_dsn, name))
    try:
        await conn.execute("UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE version = '0001'")
        pending, problems = await migration_status(conn)
        assert pending == []
        assert problems and "0001_tenancy.sql" in problems[0] and "changed" in problems[0]
        with pytest.raises(MigrationError, match="changed after it was applied"):
            await apply_migrations(conn)
    finally:
        await conn.close()
        await _drop_db(pg_base_dsn, name)


async def test_unknown_applied_migration_is_reported(pg_base_dsn, template_db):
    name = await _new_db(pg_base_dsn, template_db)
    from ucp_gateway.db.dsn import with_database

    conn = await asyncpg.connect(with_database(pg_base_dsn, name))
    try:
        await conn.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES ('9999', '9999_x.sql', 'x')")
        _, problems = await migration_status(conn)
        assert problems == ["database has migration 9999_x.sql that this gateway does not ship (newer database?)"]
    finally:
        await conn.close()
        await _drop_db(pg_base_dsn, name)


async def test_0055_on_a_database_at_0054_keeps_its_idempotency_records(pg_base_dsn, monkeypatch):
    """0055 (verb_idempotency envelope jsonb -> json, expiry index dropped) on a database in use."""
    from ucp_gateway.db import migrate

    shipped = available_migrations()
    name, dsn = await _empty_db(pg_base_dsn)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            monkeypatch.setattr(migrate, "available_migrations", lambda: [m for m in shipped if m.version <= "0054"])
            await apply_migrations(conn)
            cid = await conn.fetchval("SELECT gen_random_uuid()")
            env = '{"ok": true, "result": {"body": "{\\"b\\":1,\\"a\\":2}", "audit_id": 7}, "audit_id": 7}'
            await conn.execute(
                "INSERT INTO verb_idempotency (company_id, principal, verb, key, args_digest, envelope, audit_id,"
                " created_at, expires_at) VALUES ($1, 'buyer:x', 'checkout.create', 'k', 'd', $2::jsonb, 7, now(),"
                " now() + interval '1 day')",
                cid,
                env,
            )
            monkeypatch.setattr(migrate, "available_migrations", lambda: shipped)
            assert "0055_verb_idempotency_one_write.sql" in await apply_migrations(conn)
            row = await conn.fetchrow(
                "SELECT envelope::text AS e, pg_typeof(envelope)::text AS t FROM verb_idempotency"
            )
            assert row["t"] == "json"
            assert json.loads(row["e"]) == json.loads(env)  # the response text inside is unchanged
            assert not await conn.fetchval("SELECT to_regclass('verb_idempotency_expiry') IS NOT NULL")
        finally:
            await conn.close()
    finally:
        await _drop_db(pg_base_dsn, name)


async def _at_0056_with(pg_base_dsn, monkeypatch, hosts: list[str], settings: str):
    """A database at 0056 holding one company with ``hosts`` and ``settings`` (jsonb text)."""
    from ucp_gateway.db import migrate

    shipped = available_migrations()
    name, dsn = await _empty_db(pg_base_dsn)
    conn = await asyncpg.connect(dsn)
    monkeypatch.setattr(migrate, "available_migrations", lambda: [m for m in shipped if m.version <= "0056"])
    await apply_migrations(conn)
    cid = await conn.fetchval(
        "INSERT INTO companies (id, slug, display_name, settings) VALUES (gen_random_uuid(), 'old', 'Old', $1::jsonb)"
        " RETURNING id",
        settings,
    )
    await conn.executemany(
        "INSERT INTO company_hosts (hostname, company_id) VALUES ($1, $2)", [(h, cid) for h in hosts]
    )
    monkeypatch.setattr(migrate, "available_migrations", lambda: [m for m in shipped if m.version <= "0057"])
    return name, conn, cid


async def _validated(conn) -> dict[str, bool]:
    rows = await conn.fetch(
        "SELECT conname, convalidated FROM pg_constraint"
        " WHERE conname IN ('company_hosts_hostname_check', 'companies_settings_object')"
    )
    return {r["conname"]: r["convalidated"] for r in rows}


async def test_0057_on_a_database_in_use_keeps_its_rows_and_takes_ipv6(pg_base_dsn, monkeypatch):
    """0057 (hostname CHECK takes IPv6, settings must be an object) on a database at 0056 with rows."""
    name, conn, cid = await _at_0056_with(pg_base_dsn, monkeypatch, ["shop.example", "2001:db8::a"], '{"a": 1}')
    try:
        with pytest.raises(asyncpg.CheckViolationError):  # 0001 read ::1 as host:port
            await conn.execute("INSERT INTO company_hosts (hostname, company_id) VALUES ('::1', $1)", cid)
        assert await apply_migrations(conn) == ["0057_hosts_ipv6_settings_object.sql"]
        assert await _validated(conn) == {"company_hosts_hostname_check": True, "companies_settings_object": True}
        assert await conn.fetchval("SELECT array_agg(hostname ORDER BY hostname) FROM company_hosts") == [
            "2001:db8::a",
            "shop.example",
        ]
        await conn.execute("INSERT INTO company_hosts (hostname, company_id) VALUES ('::1', $1)", cid)
        for bad in ("shop:80", "a:b"):
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute("INSERT INTO company_hosts (hostname, company_id) VALUES ($1, $2)", bad, cid)
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE companies SET settings = '[]'")
    finally:
        await conn.close()
        await _drop_db(pg_base_dsn, name)


async def test_0057_applies_over_rows_it_would_refuse_and_checks_new_ones(pg_base_dsn, monkeypatch):
    """Rows 0001 let through that 0057 refuses (a colon that is no IPv6, settings not an object) are kept
    as they are: the migration applies, the constraints stay NOT VALID, new and updated rows are checked."""
    name, conn, cid = await _at_0056_with(pg_base_dsn, monkeypatch, ["x:y:z", "shop.example"], '"oops"')
    try:
        assert await apply_migrations(conn) == ["0057_hosts_ipv6_settings_object.sql"]
        assert await _validated(conn) == {"company_hosts_hostname_check": False, "companies_settings_object": False}
        assert await conn.fetchval("SELECT settings FROM companies") == '"oops"'  # not rewritten
        assert await conn.fetchval("SELECT count(*) FROM company_hosts") == 2
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("INSERT INTO company_hosts (hostname, company_id) VALUES ('a:b', $1)", cid)
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE companies SET settings = '[]'")
        await conn.execute("UPDATE companies SET settings = '{}'")  # the operator's correction, then:
        await conn.execute("ALTER TABLE companies VALIDATE CONSTRAINT companies_settings_object")
    finally:
        await conn.close()
        await _drop_db(pg_base_dsn, name)

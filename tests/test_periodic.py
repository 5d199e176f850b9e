"""Background work by what is due: the key scheduler and the retention sweeper find due work in one
read over all companies, act only on those companies, within a round's budget, once per round
across replicas; the read sees only the columns it needs."""

from __future__ import annotations

import asyncio
import datetime as dt

import asyncpg
import pytest

from ucp_gateway import retention
from ucp_gateway.clock import FrozenClock
from ucp_gateway.db import platform_scan_tx, tenant_tx
from ucp_gateway.db.database import connect_database
from ucp_gateway.keys import (
    KekRing,
    Vault,
    attach_vault,
    ensure_active_key,
    list_keys,
    rotate,
    scheduler,
)
from ucp_gateway.keys.repository import list_key_events
from ucp_gateway.periodic import Budget
from ucp_gateway.tenancy import create_company

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
PUBLISH_MIN, GRACE = 3600, 7 * 86400


class CountingPool:
    """The app pool, counting the connections taken from it (each unit of work takes one)."""

    def __init__(self, pool: asyncpg.Pool):
        self._pool, self.acquired = pool, 0

    def acquire(self, *args, **kwargs):
        self.acquired += 1
        return self._pool.acquire(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._pool, name)


async def _bystanders(database, n: int, *, prefix: str = "quiet") -> None:
    """``n`` companies with an active key each and nothing due (written by the owner in one statement:
    their keys are never decrypted here, only their states and times matter)."""
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        await owner.execute(
            "INSERT INTO companies (id, slug, display_name) SELECT gen_random_uuid(), $1 || '-' || i, 'Quiet ' || i"
            " FROM generate_series(1, $2) i",
            prefix,
            n,
        )
        await owner.execute(
            "INSERT INTO company_keys (company_id, kid, state, public_jwk, private_enc, kek_id, created_at,"
            " state_changed_at) SELECT id, substr(md5(id::text) || md5(slug), 1, 43), 'active', '{}', '{}', 'kek-1',"
            " $2, $2 FROM companies WHERE slug LIKE $1 || '-%'",
            prefix,
            NOW - dt.timedelta(days=400),
        )
    finally:
        await owner.close()


@pytest.fixture
def vault(database):
    v = Vault(KekRing.parse(KekRing.new_entry("kek-1")))
    attach_vault(database.pool, v)
    return v


async def _pending(database, slug: str, *, at: dt.datetime):
    c = await create_company(database.pool, slug=slug, display_name=slug.title())
    await ensure_active_key(database.pool, c.id, now=at - dt.timedelta(days=30))
    await rotate(database.pool, c.id, actor="t", reason="r", now=at)
    return c


async def _run(pool, now, **kw):
    return await scheduler.run_once(pool, now=now, publish_min=PUBLISH_MIN, rotating_grace=GRACE, **kw)


async def test_a_due_key_among_thousands_is_rotated_on_time_and_the_others_cost_nothing(database, vault):
    await _bystanders(database, 3000)
    due = await _pending(database, "due", at=NOW)
    pool = CountingPool(database.pool)
    # a minute before it is due: nothing happens, and the round takes a fixed few connections
    r = await _run(pool, NOW + dt.timedelta(seconds=PUBLISH_MIN - 60), vault=vault)
    assert r.done == {} and r.left == 0
    assert pool.acquired <= 3  # the lock, the due read, the keyless read: not one per company
    pool.acquired = 0
    r = await _run(pool, NOW + dt.timedelta(seconds=PUBLISH_MIN), vault=vault)
    assert [ev for _, ev in r.done["due"]] == ["activate"] and set(r.done) == {"due"}
    assert pool.acquired <= 4  # ... and one tenant transaction for the one due company
    states = sorted(k.state.value for k in await list_keys(database.pool, due.id))
    assert states == ["active", "rotating"]
    # the old key retires once its grace is over, in a round of its own
    later = NOW + dt.timedelta(seconds=PUBLISH_MIN + GRACE)  # it stopped signing at PUBLISH_MIN
    assert [ev for _, ev in (await _run(database.pool, later, vault=vault)).done["due"]] == ["retire"]
    assert (await _run(database.pool, later, vault=vault)).done == {}


async def test_a_company_with_no_active_key_gets_one_from_the_round(database, vault):
    await _bystanders(database, 200)
    c = await create_company(database.pool, slug="keyless", display_name="Keyless")
    assert (await _run(database.pool, NOW)).done == {}  # without a vault it cannot create one
    r = await _run(database.pool, NOW, vault=vault)
    assert [ev for _, ev in r.done["keyless"]] == ["create"]
    assert [k.state.value for k in await list_keys(database.pool, c.id)] == ["active"]


async def test_a_round_is_bounded_and_reports_what_it_left(database, vault):
    for i in range(3):
        await _pending(database, f"due-{i}", at=NOW)
    at = NOW + dt.timedelta(seconds=PUBLISH_MIN)
    first = await _run(database.pool, at, vault=vault, budget=Budget(items=2))
    assert len(first.done) == 2 and first.left == 1
    second = await _run(database.pool, at, vault=vault, budget=Budget(items=2))
    assert set(second.done) == {"due-0", "due-1", "due-2"} - set(first.done) and second.left == 0
    # a time budget already spent acts on nothing and leaves everything due
    await _pending(database, "due-3", at=NOW)
    spent = await _run(database.pool, at, vault=vault, budget=Budget(seconds=0))
    assert spent.done == {} and spent.left == 1


async def test_a_key_row_held_by_a_request_is_left_for_the_next_round_not_waited_on(database, vault):
    c = await _pending(database, "held", at=NOW)
    at = NOW + dt.timedelta(seconds=PUBLISH_MIN)
    async with tenant_tx(database.pool, c.id) as holder:
        await holder.execute("SELECT 1 FROM company_keys WHERE state = 'pending' FOR UPDATE")
        r = await asyncio.wait_for(_run(database.pool, at, vault=vault), timeout=5)
        assert r.done == {} and r.left == 1
    assert [ev for _, ev in (await _run(database.pool, at, vault=vault)).done["held"]] == ["activate"]


async def test_two_replicas_run_each_round_once(database, db_settings, vault):
    """Two gateways (their own pools) run their rounds at the same moment: each due key is
    activated exactly once, whichever replica did it."""
    companies = [await _pending(database, f"due-{i}", at=NOW) for i in range(20)]
    other = await connect_database(db_settings, migrate=False)
    try:
        attach_vault(other.pool, vault)
        at = NOW + dt.timedelta(seconds=PUBLISH_MIN)
        rounds = await asyncio.gather(*(_run(p, at, vault=vault) for p in (database.pool, other.pool) * 2))
    finally:
        await other.close()
    done = [r.done for r in rounds if r is not None]
    slugs = [slug for d in done for slug in d]
    assert sorted(slugs) == sorted(c.slug for c in companies)  # each once, over all the rounds
    for c in companies:
        events = [e["event"] for e in await list_key_events(database.pool, c.id)]
        assert events.count("activate") == 1


async def test_retention_deletes_exactly_the_expired_rows_of_every_company(database):
    """Among thousands of companies with live rows, the companies with expired rows lose exactly
    those; a round with nothing expired takes a fixed few connections, whatever the count."""
    await _bystanders(database, 2000)
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        # every company has a live idempotency record; every 100th also an expired one
        await owner.execute(
            "INSERT INTO verb_idempotency (company_id, principal, verb, key, args_digest, envelope, created_at,"
            " expires_at) SELECT id, 'p', 'checkout.create', 'live', 'd', '{}', $1::timestamptz,"
            " $1::timestamptz + interval '1 day' FROM companies",
            NOW,
        )
        await owner.execute(
            "INSERT INTO verb_idempotency (company_id, principal, verb, key, args_digest, envelope, created_at,"
            " expires_at) SELECT id, 'p', 'checkout.create', 'old', 'd', '{}', $1, $1"
            " FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM companies) c WHERE n % 100 = 0",
            NOW - dt.timedelta(days=3),
        )
        expired = {
            r["slug"]
            for r in await owner.fetch(
                "SELECT c.slug FROM companies c JOIN verb_idempotency v ON v.company_id = c.id WHERE v.key = 'old'"
            )
        }
        assert len(expired) == 20
        pool = CountingPool(database.pool)
        r = await retention.run_once(pool, now=NOW, margin=3600, batch=100)
        assert r.done == {slug: {"verb_idempotency": 1} for slug in expired} and r.left == 0
        # the lock, one read that finds the 20, one tenant transaction each, one read that finds none
        assert pool.acquired == 2 + 20 + 1
        left = await owner.fetch("SELECT key, count(*) AS n FROM verb_idempotency GROUP BY key")
        assert {x["key"]: x["n"] for x in left} == {"live": 2000}
        pool.acquired = 0
        r = await retention.run_once(pool, now=NOW, margin=3600, batch=100)
        assert r.done == {} and pool.acquired == 2
    finally:
        await owner.close()


async def test_the_due_read_sees_only_the_columns_it_needs(database, vault):
    c = await _pending(database, "acme", at=NOW)
    async with tenant_tx(database.pool, c.id) as conn:
        await conn.execute(
            "INSERT INTO verb_idempotency (company_id, principal, verb, key, args_digest, envelope, created_at,"
            " expires_at) VALUES ($1, 'p', 'checkout.create', 'k', 'd', '{\"secret\": 1}', $2, $2)",
            c.id,
            NOW,
        )
    async with platform_scan_tx(database.pool, "key_schedule", role="ucp_scan") as conn:
        assert await conn.fetchval("SELECT current_user") == "ucp_scan"
        assert await conn.fetchval("SELECT count(*) FROM company_keys WHERE state = 'pending'") == 1
        assert await conn.fetchval("SELECT count(*) FROM verb_idempotency") == 0  # another job's scope
    for scope, sql in (
        ("key_schedule", "SELECT private_enc FROM company_keys"),
        ("key_schedule", "SELECT public_jwk FROM company_keys"),
        ("retention", "SELECT envelope FROM verb_idempotency"),
        ("retention", "SELECT display_name FROM companies"),
        ("retention", "SELECT * FROM products"),
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with platform_scan_tx(database.pool, scope, role="ucp_scan") as conn:
                await conn.fetch(sql)
    async with platform_scan_tx(database.pool, "retention", role="ucp_scan") as conn:
        assert await conn.fetchval("SELECT count(*) FROM verb_idempotency") == 1
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # and writes nothing
            await conn.execute("DELETE FROM verb_idempotency")
    # the app role itself, under the same scope without the role, sees no tenant's rows
    async with platform_scan_tx(database.pool, "retention") as conn:
        assert await conn.fetchval("SELECT current_user") == "ucp_gateway_app"
        assert await conn.fetchval("SELECT count(*) FROM verb_idempotency") == 0
    async with database.pool.acquire() as conn:  # the role ended with its transaction
        assert await conn.fetchval("SELECT current_user") == "ucp_gateway_app"
    with pytest.raises(ValueError):
        async with platform_scan_tx(database.pool, "retention", role="ucp_scan; RESET ROLE"):
            pass


async def test_the_running_app_rotates_a_due_key_among_many(aiohttp_client, database, db_settings):
    """create_app starts the scheduler: a key due among hundreds of companies is activated within
    a few intervals (a frozen clock past its publication time)."""
    from ucp_gateway.app import create_app
    from ucp_gateway.appkeys import CLOCK

    await _bystanders(database, 500)
    real = dt.datetime.now(dt.UTC)
    c = await create_company(database.pool, slug="due", display_name="Due")
    app = create_app(db_settings.model_copy(update={"keys_scheduler_interval": 0.05}), database=database)
    app[CLOCK] = FrozenClock(real + dt.timedelta(seconds=PUBLISH_MIN + 5))
    await aiohttp_client(app)
    await ensure_active_key(database.pool, c.id, now=real - dt.timedelta(days=1))
    await rotate(database.pool, c.id, actor="t", reason="r", now=real)
    for _ in range(100):
        states = sorted(k.state.value for k in await list_keys(database.pool, c.id))
        if states == ["active", "rotating"]:
            break
        await asyncio.sleep(0.05)
    assert states == ["active", "rotating"]

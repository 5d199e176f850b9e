"""A database outage is answered as one: 503 with Retry-After and a JSON body on every route that
needs the database, /readyz 503, one log line per change, and recovery without a restart.

The outage is real: the gateway's pool reaches the test PostgreSQL through a Unix-socket relay
(:mod:`.pgproxy`) that the test cuts (listening socket gone, live sessions dropped) and restores.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from ucp_gateway.app import create_app
from ucp_gateway.db.database import connect_database
from ucp_gateway.db.outage import DatabaseUnavailable, as_outage, is_outage
from ucp_gateway.tenancy import create_company
from ucp_gateway.verbs.auth import issue_staff_token

from .pgproxy import Relay, socket_of, via

HOST = {"Host": "outage-shop.test"}


@pytest.fixture
async def relay(db_settings, tmp_path):
    r = Relay(socket_of(db_settings.database_url), tmp_path)
    await r.restore()
    yield r
    await r.cut()


@pytest.fixture
async def gateway(aiohttp_client, db_settings, relay, tmp_path):
    settings = db_settings.model_copy(
        update={"database_url": via(db_settings.database_url, tmp_path), "db_pool_min": 1, "host_cache_ttl": 0.0}
    )
    db = await connect_database(settings)
    company = await create_company(
        db.pool,
        slug="outage-shop",
        display_name="Outage Shop",
        hostnames=["outage-shop.test"],
        tier="growth",
        signature_policy="optional",
    )
    token = await issue_staff_token(db.pool, company.id, "read_only", "ops")
    app = create_app(settings, database=db)

    async def bug(request: web.Request) -> web.Response:  # a fault of the gateway's SQL, not an outage
        async with db.pool.acquire() as conn:
            await conn.fetch("SELECT * FROM no_such_table")
        return web.Response()

    app.router.add_get("/_test/sql-bug", bug)
    client = await aiohttp_client(app)
    try:
        yield client, {**HOST, "Authorization": f"Bearer {token}"}, db
    finally:
        await db.close()


DISPATCH = {"verb": "customer.context", "args": {"customer_id": "cust_1"}}


async def _statuses(client, staff) -> dict[str, tuple[int, dict, str | None]]:
    out = {}
    for name, call in {
        "readyz": lambda: client.get("/readyz"),
        "dispatch": lambda: client.post("/api/v1/agent/dispatch", json=DISPATCH, headers=staff),
        "profile": lambda: client.get("/.well-known/ucp", headers=HOST),
        "checkout": lambda: client.get("/ucp/v1/checkout-sessions/cs_1", headers=HOST),
        "terms": lambda: client.get("/terms", headers=HOST),
    }.items():
        r = await call()
        body = await r.json() if r.content_type == "application/json" else {}
        out[name] = (r.status, body, r.headers.get("Retry-After"))
    return out


async def test_outage_is_503_everywhere_logged_once_and_recovers(gateway, relay):
    client, staff, db = gateway
    before = await _statuses(client, staff)
    assert all(s < 500 for s, _, _ in before.values()), before
    with capture_logs() as logs:
        await relay.cut()
        for _ in range(3):  # every request answers 503, and none logs
            down = await _statuses(client, staff)
            for name, (status, body, retry) in down.items():
                assert status == 503 and retry == "1", (name, status, body)
                assert body.get("code") in ("unavailable", "not_ready"), (name, body)
        assert db.health.snapshot().up is False
        await relay.restore()
        deadline = time.monotonic() + 10
        while (await client.post("/api/v1/agent/dispatch", json=DISPATCH, headers=staff)).status == 503:
            assert time.monotonic() < deadline, "no recovery within 10 s"
            await asyncio.sleep(0.05)
        after = await _statuses(client, staff)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
    events = [e["event"] for e in logs]
    assert events.count("database_unavailable") == 1 and events.count("database_available") == 1, events
    assert not [e for e in logs if e.get("log_level") in ("error", "critical") or "exc_info" in e], logs
    assert db.health.snapshot().up and db.health.snapshot().outages == 1


async def test_a_query_fault_is_still_a_500_not_a_503(gateway):
    client, _, _ = gateway
    r = await client.get("/_test/sql-bug", headers=HOST)
    assert r.status == 500 and "Retry-After" not in r.headers
    assert (await r.json())["code"] == "internal_error"


def test_outage_classification():
    assert is_outage(DatabaseUnavailable()) and is_outage(asyncpg.ConnectionDoesNotExistError("gone"))
    assert is_outage(asyncpg.CannotConnectNowError("starting up")) and is_outage(asyncpg.DiskFullError("full"))
    assert is_outage(asyncpg.AdminShutdownError("terminating connection due to administrator command"))
    for fault in (asyncpg.UndefinedTableError("x"), asyncpg.QueryCanceledError("timeout"), AttributeError("x"),
                  FileNotFoundError("x"), asyncpg.InterfaceError("another operation is in progress")):  # fmt: skip
        assert not is_outage(fault) and as_outage(fault) is None, fault
    exc = DatabaseUnavailable()
    assert exc.http_status == 503 and exc.code == "unavailable" and isinstance(exc, OSError)

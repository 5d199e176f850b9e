"""A response is signed with the cached company key only when the request's own COMMIT confirmed,
in the same round trip, that this exact key (kid, stored record) is still the active one; a key
retired or compromised by another process, a rewrapped record or a request without a confirming
commit take the reference path (keys.active_signing_key), never the cached key."""

from __future__ import annotations

import asyncpg
import pytest
from aiohttp import web
from pydantic import SecretStr

from ucp_gateway import httpsig
from ucp_gateway.appkeys import DATABASE
from ucp_gateway.clock import FrozenClock
from ucp_gateway.db import COMMIT_PROBE, CommitProbe, tenant_tx
from ucp_gateway.httpsig.signkey import probe_sql
from ucp_gateway.httpsig.web import _SIGNING_KEYS
from ucp_gateway.keys import KekRing, compromise_key
from ucp_gateway.keys.active import active_signing_key_record
from ucp_gateway.tenancy import create_company

from .conftest import make_app
from .signer import new_key, sign_request

BODY = b'{"payment": {}}'


async def _owner_exec(database, sql: str, *args) -> None:
    conn = await asyncpg.connect(database.owner_dsn)  # as another replica or an operator would
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


@pytest.fixture
async def shop(db_settings, database, aiohttp_client, profile_server):
    settings = db_settings.model_copy(update={"kek_ring": SecretStr(KekRing.new_entry("kek-1"))})
    clock = FrozenClock()
    company = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["shop.example"])
    priv, jwk = new_key()
    profile_server["profile"]["signing_keys"] = [jwk]
    app = make_app(settings, database, clock)

    async def complete_in_tx(request: web.Request) -> web.Response:  # as commerce's complete_checkout
        httpsig.mark_for_signing(request)
        async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
            await conn.fetchval("SELECT count(*) FROM company_keys")
        return web.json_response({"id": request.match_info["id"], "status": "completed"})

    app.router.add_post("/tx/{id}/complete", complete_in_tx)
    client = await aiohttp_client(app)

    async def call(path: str = "/tx/chk_1/complete") -> str:
        created = int(clock.now().timestamp())
        hdrs = sign_request(priv, profile=profile_server["url"], created=created, path=path, body=BODY)
        r = await client.post(path, headers=[("Host", "shop.example"), *hdrs], data=BODY)
        assert r.status == 200, await r.text()
        return r.headers["Signature-Input"].rsplit('keyid="', 1)[1].rstrip('"')

    return app, company, call


async def test_cached_key_signs_only_when_the_commit_confirms_it(shop, database):
    app, company, call = shop
    keys = app[_SIGNING_KEYS]
    k1 = await call()  # first signature: the reference path (creates the key), then cached
    assert keys.hits == 0
    assert await call() == k1 and keys.hits == 1  # confirmed by the handler's COMMIT
    await _owner_exec(database, "UPDATE company_keys SET state = 'retired' WHERE kid = $1", k1)
    k2 = await call()  # retired elsewhere: never signs again, the reference path makes a new key
    assert k2 != k1 and keys.hits == 1
    assert await call() == k2 and keys.hits == 2
    k3 = await compromise_key(database.pool, company.id, k2, actor="t", reason="leak", now=FrozenClock().now())
    assert await call() == k3 != k2 and keys.hits == 2
    assert await call("/checkout-sessions/chk_1/complete") == k3  # no tenant transaction: nothing confirms
    assert keys.hits == 2
    assert await call() == k3 and keys.hits == 3


async def test_changed_record_takes_the_reference_path(shop, database):
    app, _, call = shop
    keys = app[_SIGNING_KEYS]
    k1 = await call()
    # same key, another stored record (as a rewrap writes): the cached entry is not confirmed
    await _owner_exec(
        database,
        "UPDATE company_keys SET private_enc = private_enc || '{\"note\": 1}'::jsonb WHERE kid = $1",
        k1,
    )
    assert await call() == k1 and keys.hits == 0  # re-read (and decrypted) by the reference path
    assert await call() == k1 and keys.hits == 1  # the new record is the one confirmed from now on


async def test_probe_rides_on_commit_and_fails_closed(shop, database):
    _, company, call = shop
    await call()
    pool = database.pool
    key, record = await active_signing_key_record(pool, company.id)
    other = await create_company(database.pool, slug="other", display_name="O", hostnames=["other.example"])
    assert probe_sql(company.id, "bad'kid", record) is None  # never inlined

    async def status(sql: str, *, armed: bool = True, fail: bool = False, cid=company.id) -> str | None:
        probe = CommitProbe(sql)
        probe.armed = armed
        token = COMMIT_PROBE.set(probe)
        try:
            async with tenant_tx(pool, cid) as conn:
                await conn.fetchval("SELECT 1")
                if fail:
                    raise RuntimeError("rolled back")
        except RuntimeError:
            pass
        finally:
            COMMIT_PROBE.reset(token)
        return probe.status

    good = probe_sql(company.id, key.kid, record)
    assert await status(good) == "SELECT 1"
    assert await status(good, cid=other.id) == "SELECT 1"  # the read sets its own company context
    assert await status(good, armed=False) is None
    assert await status(good, fail=True) is None  # a rollback sends nothing
    other_kid = key.kid[:-1] + ("B" if key.kid.endswith("A") else "A")  # never the kid itself
    assert await status(probe_sql(company.id, other_kid, record)) == "SELECT 0"
    assert await status(probe_sql(company.id, key.kid, record + " ")) == "SELECT 0"
    assert await status(probe_sql(other.id, key.kid, record)) == "SELECT 0"
    async with pool.acquire() as conn:  # no context left on the pooled connections
        assert not await conn.fetchval("SELECT current_setting('app.company_id', true)")

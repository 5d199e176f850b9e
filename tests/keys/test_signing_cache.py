"""The active key is read from the database on every call (one statement); only decrypted key
objects are cached, per exact stored record, so a lifecycle change or a changed row is seen on the
very next signature, in every replica, even while the old key's object is still cached."""

from __future__ import annotations

import base64
import json

import asyncpg
import pytest

from ucp_gateway.keys import (
    KekRing,
    KeyDecryptError,
    NoActiveKey,
    Vault,
    active_signing_key,
    apply_event,
    attach_vault,
    compromise_key,
    ensure_active_key,
    rewrap_company,
    rotate,
)
from ucp_gateway.keys.active import _ACTIVE_ONE_STATEMENT
from ucp_gateway.tenancy import create_company

_SET_ENC = "UPDATE company_keys SET private_enc = $2::jsonb WHERE kid = $1"


async def _owner_exec(database, sql: str, *args) -> None:
    """A change made outside this process's key API (as another replica or an operator would):
    nothing here is told, so only the database can tell."""
    conn = await asyncpg.connect(database.owner_dsn)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def test_one_statement_sees_only_its_own_company(database, vault, two_companies, clock):
    a, b = two_companies
    ka = await ensure_active_key(database.pool, a.id, now=clock.now())
    kb = await ensure_active_key(database.pool, b.id, now=clock.now())
    assert (await database.pool.fetchrow(_ACTIVE_ONE_STATEMENT, str(a.id)))["kid"] == ka
    assert (await database.pool.fetchrow(_ACTIVE_ONE_STATEMENT, str(b.id)))["kid"] == kb
    # the tenant context lived for that statement only: the next one on the pool sees no rows
    async with database.pool.acquire() as conn:
        for _ in range(3):
            await conn.fetchrow(_ACTIVE_ONE_STATEMENT, str(a.id))
            assert not await conn.fetchval("SELECT current_setting('app.company_id', true)")
            assert await conn.fetchval("SELECT count(*) FROM company_keys") == 0
    # RLS still applies: b's row can never come back for a, whatever the explicit id says
    await _owner_exec(database, "UPDATE company_keys SET state = 'retired' WHERE kid = $1", ka)
    assert await database.pool.fetchrow(_ACTIVE_ONE_STATEMENT, str(a.id)) is None
    with pytest.raises(NoActiveKey):
        await active_signing_key(database.pool, a.id, create_if_missing=False)


async def test_compromised_key_never_signs_again_though_cached(database, vault, two_companies, clock):
    a, _ = two_companies
    k1 = (await active_signing_key(database.pool, a.id, now=clock.now())).kid
    assert vault.size == 1
    # another replica marks it compromised: this process's cache still holds k1's object
    await _owner_exec(database, "UPDATE company_keys SET state = 'compromised' WHERE kid = $1", k1)
    assert vault.size == 1
    with pytest.raises(NoActiveKey):  # no active key: nothing signs, the cached k1 is not used
        await active_signing_key(database.pool, a.id, create_if_missing=False)
    nxt = await active_signing_key(database.pool, a.id, now=clock.now())
    assert nxt.kid != k1  # a new key is created for the company; k1 is never used again


async def test_compromise_through_the_api_forgets_and_replaces(database, vault, two_companies, clock):
    a, _ = two_companies
    k1 = (await active_signing_key(database.pool, a.id, now=clock.now())).kid
    new = await compromise_key(database.pool, a.id, k1, actor="t", reason="leak", now=clock.now())
    assert (await active_signing_key(database.pool, a.id)).kid == new != k1
    assert vault.size == 1  # k1's object is gone, the replacement is cached


async def test_rotated_key_signs_the_next_response_and_retired_never(database, vault, two_companies, clock):
    a, _ = two_companies
    k1 = await active_signing_key(database.pool, a.id, now=clock.now())
    pending = await rotate(database.pool, a.id, actor="t", reason="r", now=clock.now())
    assert (await active_signing_key(database.pool, a.id)).kid == k1.kid  # pending never signs
    await apply_event(database.pool, a.id, pending.kid, "activate", actor="t", reason="go", now=clock.now())
    k2 = await active_signing_key(database.pool, a.id)
    assert k2.kid == pending.kid and k2.public_jwk == pending.public_jwk
    await apply_event(database.pool, a.id, k1.kid, "retire", actor="t", reason="old", now=clock.now())
    assert (await active_signing_key(database.pool, a.id)).kid == k2.kid


async def test_changed_record_is_decrypted_again_never_served_from_cache(database, vault, two_companies, clock):
    a, _ = two_companies
    sk = await active_signing_key(database.pool, a.id, now=clock.now())
    conn = await asyncpg.connect(database.owner_dsn)
    try:
        b = json.loads(await conn.fetchval("SELECT private_enc::text FROM company_keys WHERE kid = $1", sk.kid))
    finally:
        await conn.close()
    ct = bytearray(base64.b64decode(b["ct"]))
    ct[3] ^= 0x01
    tampered = dict(b, ct=base64.b64encode(bytes(ct)).decode())
    await _owner_exec(database, _SET_ENC, sk.kid, json.dumps(tampered))
    with pytest.raises(KeyDecryptError):  # the cached object for the old bytes is not used
        await active_signing_key(database.pool, a.id)
    await _owner_exec(database, _SET_ENC, sk.kid, json.dumps(b))
    assert (await active_signing_key(database.pool, a.id)).private_key is sk.private_key  # same bytes: cached


async def test_rewrapped_row_replaces_its_cache_entry(database, two_companies, clock):
    a, _ = two_companies
    keks = KekRing.parse(KekRing.new_entry("kek-1")).keks | KekRing.parse(KekRing.new_entry("kek-2")).keks
    here = Vault(KekRing(keks, "kek-1"))
    attach_vault(database.pool, here)
    sk1 = await active_signing_key(database.pool, a.id, now=clock.now())
    assert await rewrap_company(database.pool, a.id, vault=Vault(KekRing(keks, "kek-2"))) >= 1
    sk2 = await active_signing_key(database.pool, a.id)
    assert sk2.kid == sk1.kid and sk2.private_key is not sk1.private_key  # decrypted again from the new record
    assert here.size == 1  # the entry of the old record is gone


async def test_cache_is_bounded_least_recently_used_first(database, clock):
    small = Vault(KekRing.parse(KekRing.new_entry("kek-1")), max_entries=2)
    attach_vault(database.pool, small)
    cos = [
        await create_company(database.pool, slug=f"c{i}", display_name=f"C{i}", hostnames=[f"c{i}.example"])
        for i in range(3)
    ]
    keys = [await active_signing_key(database.pool, c.id, now=clock.now()) for c in cos]
    assert small.size == 2
    again = await active_signing_key(database.pool, cos[2].id)
    assert again.private_key is keys[2].private_key  # most recent: still cached
    assert (await active_signing_key(database.pool, cos[0].id)).private_key is not keys[0].private_key  # evicted
    assert small.size == 2
    small.clear()
    assert small.size == 0


async def test_vault_repr_and_key_repr_hide_material(database, vault, two_companies, clock):
    a, _ = two_companies
    sk = await active_signing_key(database.pool, a.id, now=clock.now())
    d = sk.private_key.private_numbers().private_value.to_bytes(32, "big")
    secrets = [base64.b64encode(vault.ring.keks["kek-1"]).decode(), base64.urlsafe_b64encode(d).decode().rstrip("=")]
    for text in (repr(vault), repr(sk), str(sk)):
        assert not any(x in text for x in secrets) and str(int.from_bytes(d, "big")) not in text


async def test_app_cleanup_clears_the_cache(db_settings, database, aiohttp_client, clock):
    from aiohttp import web

    from ucp_gateway.appkeys import DATABASE, SETTINGS
    from ucp_gateway.keys import web as keys_web

    app = web.Application()
    app[SETTINGS] = db_settings
    app[DATABASE] = database
    keys_web.setup(app)
    client = await aiohttp_client(app)
    vault = app[keys_web.VAULT]
    co = await create_company(database.pool, slug="z", display_name="Z", hostnames=["z.example"])
    await active_signing_key(database.pool, co.id, now=clock.now())
    assert vault.size == 1
    await client.close()
    assert vault.size == 0


async def test_a_signed_response_costs_one_statement(database, two_companies, clock):
    """The key lookup is one statement on the wire (plus the pool's own reset on release),
    cached key or not; the tenant transaction it replaced took BEGIN, set_config, SELECT, COMMIT."""
    from ucp_gateway.db.database import _init_connection

    a, _ = two_companies
    pool = await asyncpg.create_pool(database.app_dsn, min_size=1, max_size=1, init=_init_connection)
    try:
        attach_vault(pool, Vault(KekRing.parse(KekRing.new_entry("kek-1"))))
        await ensure_active_key(pool, a.id, now=clock.now())
        seen: list[str] = []
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda rec: seen.append(rec.query))
        for _ in range(3):
            seen.clear()
            await active_signing_key(pool, a.id)
            ours = [q for q in seen if "company_keys" in q or "set_config" in q or q.strip() in ("BEGIN", "COMMIT")]
            assert ours == [_ACTIVE_ONE_STATEMENT], seen
    finally:
        await pool.close()

"""Key lifecycle on real PostgreSQL with a controllable clock; encryption at rest fails closed;
RLS keeps companies apart."""

from __future__ import annotations

import base64
import datetime as dt

import asyncpg
import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.errors import Conflict
from ucp_gateway.keys import (
    IllegalTransition,
    KekRing,
    KeyDecryptError,
    KeyState,
    NoActiveKey,
    Vault,
    active_signing_key,
    advance_company,
    apply_event,
    attach_vault,
    compromise_key,
    ensure_active_key,
    list_keys,
    published_jwks,
    rewrap_company,
    rotate,
)
from ucp_gateway.keys.repository import list_key_events

GRACE = 7 * 86400
PUB = 3600


def states(keys):
    return {k.kid: k.state for k in keys}


async def test_rotation_end_to_end(database, vault, two_companies, clock):
    pool = database.pool
    a, _ = two_companies
    with pytest.raises(NoActiveKey):
        await active_signing_key(pool, a.id, create_if_missing=False)
    k1 = await ensure_active_key(pool, a.id, now=clock.now())
    assert await ensure_active_key(pool, a.id, now=clock.now()) == k1
    sk = await active_signing_key(pool, a.id)
    assert sk.kid == k1 and sk.public_jwk["kid"] == k1

    clock.advance(86400 * 90)
    new = await rotate(pool, a.id, actor="token:x", reason="quarterly", now=clock.now())
    assert new.state is KeyState.PENDING
    assert [j["kid"] for j in await published_jwks(pool, a.id)] == [k1, new.kid]  # pending is published
    assert (await active_signing_key(pool, a.id)).kid == k1  # ... but never signs
    with pytest.raises(Conflict):
        await rotate(pool, a.id, actor="t", reason="again", now=clock.now())
    with pytest.raises(Conflict, match="published"):
        await apply_event(pool, a.id, new.kid, "activate", actor="t", reason="early", now=clock.now(), publish_min=PUB)

    clock.advance(PUB - 1)
    assert await advance_company(pool, a.id, now=clock.now(), publish_min=PUB, rotating_grace=GRACE) == []
    clock.advance(1)
    done = await advance_company(pool, a.id, now=clock.now(), publish_min=PUB, rotating_grace=GRACE)
    assert [(k, e.value) for k, e in done] == [(new.kid, "activate")]
    assert states(await list_keys(pool, a.id)) == {k1: KeyState.ROTATING, new.kid: KeyState.ACTIVE}
    assert (await active_signing_key(pool, a.id)).kid == new.kid
    assert {j["kid"] for j in await published_jwks(pool, a.id)} == {k1, new.kid}  # old still verifiable

    clock.advance(GRACE - 1)
    assert await advance_company(pool, a.id, now=clock.now(), publish_min=PUB, rotating_grace=GRACE) == []
    clock.advance(1)
    await advance_company(pool, a.id, now=clock.now(), publish_min=PUB, rotating_grace=GRACE)
    assert states(await list_keys(pool, a.id))[k1] is KeyState.RETIRED
    assert [j["kid"] for j in await published_jwks(pool, a.id)] == [new.kid]
    with pytest.raises(IllegalTransition):
        await apply_event(pool, a.id, k1, "activate", actor="t", reason="undo", now=clock.now())

    events = await list_key_events(pool, a.id)
    assert [(e["kid"], e["to_state"]) for e in events] == [
        (k1, "active"),
        (new.kid, "pending"),
        (k1, "rotating"),
        (new.kid, "active"),
        (k1, "retired"),
    ]
    assert events[1]["actor"] == "token:x" and events[1]["reason"] == "quarterly"
    assert events[4]["actor"] == "scheduler"


async def test_compromise_unpublishes_and_replaces(database, vault, two_companies, clock):
    pool = database.pool
    a, _ = two_companies
    k1 = await ensure_active_key(pool, a.id, now=clock.now())
    replacement = await compromise_key(pool, a.id, k1, actor="token:o", reason="leaked", now=clock.now())
    assert replacement and replacement != k1
    assert [j["kid"] for j in await published_jwks(pool, a.id)] == [replacement]
    assert (await active_signing_key(pool, a.id)).kid == replacement
    for ev in ("activate", "retire", "rotate_out"):
        with pytest.raises(IllegalTransition):
            await apply_event(pool, a.id, k1, ev, actor="t", reason="x", now=clock.now())
    # a pending key is promoted when the active one is compromised
    p = await rotate(pool, a.id, actor="t", reason="r", now=clock.now())
    assert await compromise_key(pool, a.id, replacement, actor="t", reason="again", now=clock.now()) == p.kid


async def test_one_active_key_enforced_by_database(database, vault, two_companies, clock):
    a, _ = two_companies
    await ensure_active_key(database.pool, a.id, now=clock.now())
    await rotate(database.pool, a.id, actor="t", reason="r", now=clock.now())
    async with tenant_tx(database.pool, a.id) as conn:
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute("UPDATE company_keys SET state = 'active'")


async def _owner(database):
    return await asyncpg.connect(database.owner_dsn)


async def test_tampered_ciphertext_fails_closed(database, vault, two_companies, clock):
    a, _ = two_companies
    kid = await ensure_active_key(database.pool, a.id, now=clock.now())
    vault.forget(a.id, kid)
    conn = await _owner(database)
    try:
        blob = await conn.fetchval("SELECT private_enc::text FROM company_keys WHERE kid = $1", kid)
        import json

        b = json.loads(blob)
        ct = bytearray(base64.b64decode(b["ct"]))
        ct[5] ^= 0x80
        b["ct"] = base64.b64encode(bytes(ct)).decode()
        await conn.execute("UPDATE company_keys SET private_enc = $2::jsonb WHERE kid = $1", kid, json.dumps(b))
    finally:
        await conn.close()
    with pytest.raises(KeyDecryptError, match="tampered"):
        await active_signing_key(database.pool, a.id)


async def test_rows_swapped_between_companies_fail_closed(database, vault, two_companies, clock):
    a, b = two_companies
    ka = await ensure_active_key(database.pool, a.id, now=clock.now())
    kb = await ensure_active_key(database.pool, b.id, now=clock.now())
    vault.forget(b.id, kb)
    conn = await _owner(database)
    try:  # B's row now carries A's encrypted key (and A's kid/public key with it)
        await conn.execute(
            "UPDATE company_keys SET private_enc = (SELECT private_enc FROM company_keys WHERE kid = $1), "
            "public_jwk = (SELECT public_jwk FROM company_keys WHERE kid = $1) WHERE kid = $2",
            ka,
            kb,
        )
    finally:
        await conn.close()
    with pytest.raises(KeyDecryptError):
        await active_signing_key(database.pool, b.id)


async def test_wrong_kek_fails_closed(database, vault, two_companies, clock):
    a, _ = two_companies
    await ensure_active_key(database.pool, a.id, now=clock.now())
    other = Vault(KekRing.parse(KekRing.new_entry("kek-1")))
    with pytest.raises(KeyDecryptError):
        await active_signing_key(database.pool, a.id, vault=other)


async def test_tenant_a_cannot_read_or_write_b_keys(database, vault, two_companies, clock):
    a, b = two_companies
    kb = await ensure_active_key(database.pool, b.id, now=clock.now())
    async with tenant_tx(database.pool, a.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM company_keys") == 0
        assert await conn.fetchval("SELECT count(*) FROM company_keys WHERE kid = $1", kb) == 0
        assert await conn.execute("UPDATE company_keys SET state = 'retired' WHERE kid = $1", kb) == "UPDATE 0"
        assert await conn.fetchval("SELECT count(*) FROM key_events") == 0
    async with tenant_tx(database.pool, a.id) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # RLS WITH CHECK
            await conn.execute(
                "INSERT INTO key_events (company_id, kid, to_state, event, actor, reason, at) "
                "VALUES ($1, 'x', 'active', 'create', 'me', 'why', now())",
                b.id,
            )
    assert await list_keys(database.pool, a.id) == []
    assert await published_jwks(database.pool, a.id) == []
    with pytest.raises(NoActiveKey):
        await active_signing_key(database.pool, a.id, create_if_missing=False)


async def test_rewrap_moves_every_row_to_newest_kek(database, two_companies, clock):
    a, _ = two_companies
    old = KekRing.parse(KekRing.new_entry("kek-1"))
    attach_vault(database.pool, Vault(old))
    await ensure_active_key(database.pool, a.id, now=clock.now())
    await rotate(database.pool, a.id, actor="t", reason="r", now=clock.now() + dt.timedelta(seconds=1))
    both = Vault(KekRing(old.keks | KekRing.parse(KekRing.new_entry("kek-2")).keks, "kek-2"))
    attach_vault(database.pool, both)
    assert await rewrap_company(database.pool, a.id) == 2
    assert {k.kek_id for k in await list_keys(database.pool, a.id)} == {"kek-2"}
    assert await rewrap_company(database.pool, a.id) == 0
    only_new = Vault(KekRing({"kek-2": both.ring.keks["kek-2"]}, "kek-2"))
    assert (await active_signing_key(database.pool, a.id, vault=only_new)).kid

"""WebMCP sessions and CSRF on a real PostgreSQL."""

from __future__ import annotations

import datetime as dt

import pytest

from ucp_gateway.errors import BadRequest
from ucp_gateway.tenancy import create_company
from ucp_gateway.transports.sessions import (
    CsrfInvalid,
    SessionRequired,
    create_session,
    csrf_for,
    load_session,
    revoke_session,
    verify_csrf,
)

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


async def test_session_round_trip_and_refusals(database):
    pool = database.pool
    a = await create_company(pool, slug="shop-a", display_name="A", hostnames=["a.test"])
    b = await create_company(pool, slug="shop-b", display_name="B", hostnames=["b.test"])
    token, s = await create_session(pool, a.id, subject="user:alice", role="admin", now=NOW, ttl=3600)
    got = await load_session(pool, token, now=NOW)
    assert (got.company_id, got.subject, got.role) == (a.id, "user:alice", "admin")

    verify_csrf(token, csrf_for(token))
    for forged in (None, "", _flip_last(csrf_for(token)), csrf_for(token + "x"), "é"):
        with pytest.raises(CsrfInvalid):
            verify_csrf(token, forged)

    # across companies: the same secret under company B's id does not resolve (RLS + hash)
    forged_token = token.replace(a.id.hex, b.id.hex)
    for bad in (None, "", "garbage", forged_token, token + "x"):
        with pytest.raises(SessionRequired):
            await load_session(pool, bad, now=NOW)

    with pytest.raises(SessionRequired):
        await load_session(pool, token, now=NOW + dt.timedelta(seconds=3600))
    await revoke_session(pool, s, now=NOW)
    with pytest.raises(SessionRequired):
        await load_session(pool, token, now=NOW)
    with pytest.raises(BadRequest):
        await create_session(pool, a.id, subject="u", role="god", now=NOW, ttl=60)


async def test_token_hash_only_stored(database, pg_base_dsn):
    pool = database.pool
    a = await create_company(pool, slug="shop-c", display_name="C", hostnames=["c.test"])
    token, _ = await create_session(pool, a.id, subject="user:bob", role="read_only", now=NOW, ttl=60)
    from ucp_gateway.db import tenant_tx

    async with tenant_tx(pool, a.id) as conn:
        rows = await conn.fetch("SELECT * FROM webmcp_sessions")
    assert len(rows) == 1 and token.encode() not in bytes(rows[0]["token_hash"])
    async with tenant_tx(pool, (await create_company(pool, slug="shop-d", display_name="D")).id) as conn:
        assert await conn.fetch("SELECT * FROM webmcp_sessions") == []  # RLS


def _flip_last(value: str) -> str:
    """The same token with its last character changed (regression: appending "A" could equal it)."""
    return value[:-1] + ("B" if value[-1] == "A" else "A")


async def test_revoking_the_admin_token_ends_its_sessions(database):
    """Regression (security review): a session opened with an admin token went on working for its
    whole life (8 h) after the token was revoked."""
    from ucp_gateway.keys.admin_tokens import authenticate_admin, create_admin_token, revoke_admin_token

    pool = database.pool
    a = await create_company(pool, slug="shop-d", display_name="D", hostnames=["d.test"])
    secret, token_id = await create_admin_token(pool, a.id, "owner", now=NOW)
    staff = await authenticate_admin(pool, f"Bearer {secret}")
    other_secret, _ = await create_admin_token(pool, a.id, "owner", now=NOW)
    other = await authenticate_admin(pool, f"Bearer {other_secret}")
    cookie, _ = await create_session(pool, a.id, subject=staff.actor, role="owner", now=NOW, ttl=3600)
    kept, _ = await create_session(pool, a.id, subject=other.actor, role="owner", now=NOW, ttl=3600)
    sso, _ = await create_session(pool, a.id, subject="user:alice", role="admin", now=NOW, ttl=3600)
    assert (await load_session(pool, cookie, now=NOW)).subject == f"token:{token_id}"
    assert await revoke_admin_token(pool, a.id, token_id, now=NOW)
    with pytest.raises(SessionRequired):
        await load_session(pool, cookie, now=NOW)
    assert (await load_session(pool, kept, now=NOW)).subject == other.actor  # another token's session
    assert (await load_session(pool, sso, now=NOW)).subject == "user:alice"  # another authenticator's
    # a subject that looks like a token but names none is no session
    ghost, _ = await create_session(pool, a.id, subject="token:not-a-uuid", role="owner", now=NOW, ttl=3600)
    with pytest.raises(SessionRequired):
        await load_session(pool, ghost, now=NOW)

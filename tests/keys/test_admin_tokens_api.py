"""Staff tokens taken back: list, revoke and expiry, over the admin API (real sockets) and the CLI."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.errors import BadRequest
from ucp_gateway.keys import authenticate_admin, create_admin_token
from ucp_gateway.keys.admin_tokens import AdminAuthError, parse_expiry

from .test_admin_api import admin  # noqa: F401  (the fixture)

NOW = dt.datetime(2026, 4, 8, 12, 0, tzinfo=dt.UTC)


def test_parse_expiry():
    assert parse_expiry(None, NOW) is None and parse_expiry("", NOW) is None
    assert parse_expiry("90m", NOW) == NOW + dt.timedelta(minutes=90)
    assert parse_expiry("12h", NOW) == NOW + dt.timedelta(hours=12)
    assert parse_expiry("30d", NOW) == NOW + dt.timedelta(days=30)
    assert parse_expiry("2026-04-09T00:00:00+02:00", NOW) == dt.datetime(2026, 4, 8, 22, 0, tzinfo=dt.UTC)
    for bad in ("0d", "1w", "-1d", "soon", "2026-04-09T00:00:00", "2026-04-08T11:00:00Z", "3651d", "1e3d"):
        with pytest.raises(BadRequest):
            parse_expiry(bad, NOW)


async def test_admin_api_lists_creates_and_revokes_tokens(admin, database):  # noqa: F811
    call, toks, _a, _b = admin
    status, body = await call("GET", "/admin/v1/admin-tokens", "admin")
    assert status == 200 and {t["role"] for t in body["admin_tokens"]} == {"read_only", "employee", "admin", "owner"}
    assert all(t["state"] == "active" and t["expires_at"] is None for t in body["admin_tokens"])
    assert not any(toks["owner"] in json.dumps(t) for t in body["admin_tokens"])  # never the token text
    assert (await call("GET", "/admin/v1/admin-tokens", "employee"))[0] == 403
    assert (await call("GET", "/admin/v1/admin-tokens", "other"))[0] == 401  # another company's token

    # an instant, not a span: the app's clock is frozen in April 2026, expiry is by the database's clock
    new = {"role": "employee", "label": "ci", "expires": "2030-01-01T00:00:00Z"}
    assert (await call("POST", "/admin/v1/admin-tokens", "admin", json=new))[0] == 403  # owners only
    status, made = await call("POST", "/admin/v1/admin-tokens", "owner", json=new)
    assert status == 200 and made["role"] == "employee" and made["expires_at"] == "2030-01-01T00:00:00Z", made
    assert (await call("GET", "/admin/v1/keys", made["token"]))[0] == 200
    for bad in ({"role": "god"}, {"role": "admin", "expires": "yesterday"}, {"role": "admin", "expires": 5}):
        assert (await call("POST", "/admin/v1/admin-tokens", "owner", json=bad))[0] == 400, bad

    # a token may revoke itself; another's needs an owner
    tid = made["token_id"]
    admin_id = next(t["token_id"] for t in body["admin_tokens"] if t["role"] == "admin")
    assert (await call("POST", f"/admin/v1/admin-tokens/{admin_id}/revoke", made["token"], json={}))[0] == 403
    status, out = await call("POST", f"/admin/v1/admin-tokens/{tid}/revoke", made["token"], json={})
    assert status == 200 and out == {"token_id": tid, "state": "revoked", "was_active": True}
    assert (await call("GET", "/admin/v1/keys", made["token"]))[0] == 401
    status, out = await call("POST", f"/admin/v1/admin-tokens/{admin_id}/revoke", "owner", json={})
    assert status == 200 and out["was_active"] is True
    assert (await call("GET", "/admin/v1/keys", "admin"))[0] == 401
    assert (await call("POST", "/admin/v1/admin-tokens/not-a-uuid/revoke", "owner", json={}))[0] == 404
    unknown = "00000000-0000-4000-8000-000000000009"
    assert (await call("POST", f"/admin/v1/admin-tokens/{unknown}/revoke", "owner", json={}))[0] == 404
    listed = (await call("GET", "/admin/v1/admin-tokens", "owner"))[1]["admin_tokens"]
    states = {t["token_id"]: t["state"] for t in listed}
    assert states[tid] == states[admin_id] == "revoked"


async def test_an_expired_token_authenticates_nothing(database, two_companies, clock):
    a, _ = two_companies
    token, tid = await create_admin_token(
        database.pool, a.id, "owner", now=clock.now(), expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    )
    assert (await authenticate_admin(database.pool, f"Bearer {token}")).token_id == tid
    async with tenant_tx(database.pool, a.id) as conn:  # its hour is up (the database's clock decides)
        await conn.execute("UPDATE admin_tokens SET expires_at = now() - interval '1 second' WHERE id = $1", tid)
    with pytest.raises(AdminAuthError):
        await authenticate_admin(database.pool, f"Bearer {token}")

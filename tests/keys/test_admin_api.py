"""Admin tokens (hashed, with roles), /admin/v1/keys and /admin/v1/signatures/debug over real
sockets, the scheduler's advisory lock, the shared replay cache and the CLI."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from pydantic import SecretStr

from ucp_gateway.db import platform_tx, tenant_tx
from ucp_gateway.httpsig import KEY_RESOLVER, PgReplayStore, StaticKeyResolver
from ucp_gateway.keys import KekRing, authenticate_admin, create_admin_token, role_at_least
from ucp_gateway.keys.admin_tokens import AdminAuthError, revoke_admin_token
from ucp_gateway.keys.repository import list_key_events
from ucp_gateway.keys.scheduler import LOCK_KEY, run_once
from ucp_gateway.tenancy import create_company

from ..httpsig.conftest import make_app
from ..httpsig.signer import PROFILE, new_key

PLATFORM_KEY = new_key()


@pytest.fixture
async def admin(db_settings, database, aiohttp_client, two_companies, clock):
    settings = db_settings.model_copy(update={"kek_ring": SecretStr(KekRing.new_entry("kek-1"))})
    app = make_app(settings, database, clock)
    app[KEY_RESOLVER] = StaticKeyResolver({PROFILE: [PLATFORM_KEY[1]]})
    client = await aiohttp_client(app)
    a, b = two_companies
    toks = {}
    for role in ("read_only", "employee", "admin", "owner"):
        toks[role], _ = await create_admin_token(database.pool, a.id, role, now=clock.now())
    toks["other"], _ = await create_admin_token(database.pool, b.id, "owner", now=clock.now())

    async def call(method, path, token=None, host="acme.example", **kw):
        headers = {"Host": host, **kw.pop("headers", {})}
        if token:
            headers["Authorization"] = f"Bearer {toks.get(token, token)}"
        r = await client.request(method, path, headers=headers, **kw)
        return r.status, await r.json()

    return call, toks, a, b


async def test_tokens_are_stored_hashed_and_authenticate(database, two_companies, clock):
    a, _ = two_companies
    token, tid = await create_admin_token(database.pool, a.id, "admin", now=clock.now(), label="ci")
    async with tenant_tx(database.pool, a.id) as conn:
        row = await conn.fetchrow("SELECT * FROM admin_tokens WHERE id = $1", tid)
    assert token not in str(dict(row)) and bytes(row["token_hash"]) == hashlib.sha256(token.encode()).digest()
    p = await authenticate_admin(database.pool, f"Bearer {token}")
    assert (p.company_id, p.role, p.token_id) == (a.id, "admin", tid)
    for bad in (None, "", token, f"Basic {token}", f"Bearer {token[:-1]}x", "Bearer ucpat_zz"):
        with pytest.raises(AdminAuthError) as e:
            await authenticate_admin(database.pool, bad)
        assert e.value.http_status == 401 and e.value.message == "a valid admin bearer token is required"
    assert await revoke_admin_token(database.pool, a.id, tid, now=clock.now())
    with pytest.raises(AdminAuthError):
        await authenticate_admin(database.pool, f"Bearer {token}")


def test_role_order():
    assert role_at_least("owner", "admin") and role_at_least("admin", "admin")
    assert not role_at_least("employee", "admin") and not role_at_least("read_only", "employee")


async def test_keys_api_roles_and_lifecycle(admin, clock):
    call, _toks, _a, _ = admin
    assert (await call("GET", "/admin/v1/keys"))[0] == 401
    assert (await call("GET", "/admin/v1/keys", "read_only")) == (200, {"keys": []})
    st, body = await call("POST", "/admin/v1/keys/rotate", "employee")
    assert st == 403 and body["code"] == "forbidden"
    st, body = await call("POST", "/admin/v1/keys/rotate", "admin", json={"reason": "first key"})
    assert st == 200 and body["key"]["state"] == "active"  # bootstrap: no active key yet
    k1 = body["key"]["kid"]
    st, body = await call("POST", "/admin/v1/keys/rotate", "owner")
    k2 = body["key"]["kid"]
    assert body["key"]["state"] == "pending"
    st, body = await call("POST", f"/admin/v1/keys/{k2}/activate", "admin")
    assert st == 409 and body["code"] == "key_not_yet_published"
    clock.advance(3600)
    assert (await call("POST", f"/admin/v1/keys/{k2}/activate", "admin")) == (200, {"kid": k2, "state": "active"})
    st, body = await call("POST", f"/admin/v1/keys/{k1}/compromise", "admin")
    assert st == 403
    st, body = await call("POST", f"/admin/v1/keys/{k1}/compromise", "owner", json={"reason": "laptop lost"})
    assert st == 200 and body["state"] == "compromised" and body["active_kid"] is None
    st, body = await call("POST", f"/admin/v1/keys/{k1}/retire", "admin")
    assert st == 409 and body["code"] == "illegal_key_transition"
    st, body = await call("GET", "/admin/v1/keys", "read_only")
    listed = {k["kid"]: k for k in body["keys"]}
    assert {k: v["state"] for k, v in listed.items()} == {k1: "compromised", k2: "active"}
    assert all("private_enc" not in k and "d" not in k["public_jwk"] for k in body["keys"])  # never exported
    st, body = await call("POST", "/admin/v1/keys/nope/retire", "admin")
    assert st == 404


async def test_lifecycle_body_must_be_json(admin, database):
    call, _toks, a, _ = admin
    form = {"data": b"reason=oops", "headers": {"Content-Type": "application/x-www-form-urlencoded"}}
    st, body = await call("POST", "/admin/v1/keys/rotate", "admin", **form)
    assert st == 415 and body["code"] == "unsupported_media_type"
    data = b'{"reason": "typed"}'
    ctype = {"Content-Type": "application/json; charset=utf-8"}
    st, body = await call("POST", "/admin/v1/keys/rotate", "admin", data=data, headers=ctype)
    assert st == 200
    # regression: the reason was dropped once the signature middleware had read the body
    events = await list_key_events(database.pool, a.id)
    assert [e["reason"] for e in events if e["kid"] == body["key"]["kid"]] == ["typed"]
    # regression: a JSON body that is not an object rotated the key anyway; now 400 and no new key
    before = len(await list_key_events(database.pool, a.id))
    for bad in (b"[]", b'"x"', b"1", b"null"):
        st, err = await call("POST", "/admin/v1/keys/rotate", "admin", data=bad, headers=ctype)
        assert st == 400 and err["code"] == "invalid_request", (bad, err)
    # regression (newcomer): deep or NUL-holding JSON said only "body must be JSON"; now why, as elsewhere
    for bad, why in ((b"[" * 100 + b"]" * 100, "nesting is too deep"), (b'{"reason": "\\u0000"}', "U+0000")):
        st, err = await call("POST", "/admin/v1/keys/rotate", "admin", data=bad, headers=ctype)
        assert st == 400 and err["content"].startswith("body must be JSON: ") and why in err["content"], err
    assert len(await list_key_events(database.pool, a.id)) == before


async def test_other_company_token_gets_same_401(admin):
    call, _toks, _a, _b = admin
    st_other, body_other = await call("GET", "/admin/v1/keys", "other")  # B's owner token on A's host
    st_none, body_none = await call("GET", "/admin/v1/keys", "ucpat_" + "0" * 32 + "_" + "A" * 43)
    assert st_other == st_none == 401 and body_other == body_none


async def test_signature_debug_endpoint(admin, clock):
    from ..httpsig.signer import sign_request

    call, _toks, _a, _ = admin
    priv, jwk = PLATFORM_KEY
    body = b'{"a": 1}'
    hdrs = sign_request(
        priv, body=body, created=int(clock.now().timestamp()) - 7, profile=PROFILE, authority="acme.example"
    )
    raw = "POST /checkout-sessions HTTP/1.1\r\nHost: acme.example\r\n"
    raw += "".join(f"{n}: {v}\r\n" for n, v in hdrs)
    raw = raw + "\r\n" + '{"a": 2}'  # body changed after signing
    st, rep = await call("POST", "/admin/v1/signatures/debug", "employee", data=raw.encode())
    assert st == 403
    st, rep = await call("POST", "/admin/v1/signatures/debug", "admin", data=raw.encode())
    assert st == 200, rep
    (sig,) = rep["signatures"]
    assert sig["label"] == "sig1" and sig["params"]["keyid"] == "platform-2026"
    assert sig["signature_base"].startswith('"@method": POST\n"@authority": acme.example\n"@path": /checkout-sessions')
    assert sig["signature_base"].endswith('"@signature-params": ' + dict(hdrs)["Signature-Input"][5:])
    assert sig["missing_components"] == [] and sig["looks_der_encoded"] is False and sig["signature_length"] == 64
    assert sig["clock_skew_seconds"] == 7
    assert rep["content_digest"]["match"] is False
    assert rep["content_digest"]["received"] == dict(hdrs)["Content-Digest"]
    assert sig["key"]["found"] is True and sig["key"]["source_profile"] == PROFILE
    assert sig["key"]["jwk"]["x"] == jwk["x"]
    assert rep["verdict"] == {
        "ok": False,
        "code": "digest_mismatch",
        "status": 400,
        "content": "Content-Digest does not match the request body",
        "detail": None,
    }
    # the same request with the body it was signed over verifies
    fixed = raw.rsplit("\r\n", 1)[0] + "\r\n" + '{"a": 1}'
    st, rep = await call("POST", "/admin/v1/signatures/debug", "owner", data=fixed.encode())
    assert rep["verdict"]["ok"] is True and rep["content_digest"]["match"] is True, rep
    # regression: deeply nested JSON was a RecursionError -> 500; now a 400 like every JSON route
    deep = b"[" * 100_000 + b"]" * 100_000
    st, err = await call(
        "POST", "/admin/v1/signatures/debug", "admin", data=deep, headers={"Content-Type": "application/json"}
    )
    assert st == 400 and err["code"] == "invalid_request", err


async def test_scheduler_runs_in_one_replica_at_a_time(database, vault, two_companies, clock):
    from ucp_gateway.keys import ensure_active_key, list_keys, rotate

    a, b = two_companies
    for c in (a, b):
        await ensure_active_key(database.pool, c.id, now=clock.now())
        await rotate(database.pool, c.id, actor="t", reason="r", now=clock.now())
    async with database.pool.acquire() as other_replica:
        assert await other_replica.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY)
        assert (
            await run_once(database.pool, now=clock.now() + dt.timedelta(hours=2), publish_min=3600, rotating_grace=10)
            is None
        )
        await other_replica.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
    done = (
        await run_once(
            database.pool, now=clock.now() + dt.timedelta(hours=2), publish_min=3600, rotating_grace=10, vault=vault
        )
    ).done
    assert set(done) == {"acme", "bolt"} and all(ev == "activate" for v in done.values() for _, ev in v)
    c = await create_company(database.pool, slug="new", display_name="New")
    done = (await run_once(database.pool, now=clock.now(), publish_min=3600, rotating_grace=10, vault=vault)).done
    assert [ev for _, ev in done["new"]] == ["create"] and len(await list_keys(database.pool, c.id)) == 1
    assert sorted(k.state.value for k in await list_keys(database.pool, a.id)) == ["active", "rotating"]


async def test_pg_replay_cache_shared_and_expiring(database, clock):
    # two replicas; no amortised purge here (it would take kid-2's row, expired at +331 s, 1 run in 100)
    s1, s2 = PgReplayStore(database.pool, purge_probability=0), PgReplayStore(database.pool, purge_probability=0)
    now = clock.now()
    assert await s1.remember("kid-1", "n", now=now, ttl=330)
    assert not await s2.remember("kid-1", "n", now=now + dt.timedelta(seconds=10), ttl=330)
    assert await s2.remember("kid-2", "n", now=now, ttl=330)  # keyed on (keyid, nonce)
    assert await s2.remember("kid-1", "n", now=now + dt.timedelta(seconds=331), ttl=330)  # expired
    assert await s1.purge(now + dt.timedelta(days=1)) == 2
    async with platform_tx(database.pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM signature_nonces") == 0


async def test_pg_replay_cache_purges_expired_rows_along_the_way(database, clock):
    store = PgReplayStore(database.pool, purge_probability=1)  # every call purges what has expired
    now = clock.now()
    assert await store.remember("kid-1", "a", now=now, ttl=30)
    assert await store.remember("kid-1", "b", now=now + dt.timedelta(seconds=31), ttl=30)  # "a" purged
    async with platform_tx(database.pool) as conn:
        assert await conn.fetchval("SELECT array_agg(nonce) FROM signature_nonces") == ["b"]


async def test_cli_keys_and_tokens(db_settings, database, two_companies, capsys, tmp_path):
    import json

    from ucp_gateway.cli import main

    env = {
        "UCPGW_DATABASE_URL": db_settings.database_url,
        "UCPGW_ENVIRONMENT": "development",
        "UCPGW_KEYS_DIR": str(tmp_path / "keys"),
    }
    import logging

    import structlog

    saved_structlog, saved_handlers = structlog.get_config(), logging.getLogger().handlers[:]
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    try:
        import asyncio

        def run(*argv):
            capsys.readouterr()
            rc = asyncio.get_running_loop().run_in_executor(None, main, list(argv))
            return rc

        assert await run("keys", "rotate", "--company", "acme", "--json", "--data-dir", str(tmp_path)) == 0
        k = json.loads(capsys.readouterr().out)
        assert k["state"] == "active" and "private" not in json.dumps(k)
        assert await run("keys", "list", "--company", "acme", "--json", "--data-dir", str(tmp_path)) == 0
        assert [x["kid"] for x in json.loads(capsys.readouterr().out)] == [k["kid"]]
        assert (
            await run(
                "admin-tokens", "create", "--company", "acme", "--role", "owner", "--json", "--data-dir", str(tmp_path)
            )
            == 0
        )
        tok = json.loads(capsys.readouterr().out)["token"]
        assert (await authenticate_admin(database.pool, f"Bearer {tok}")).role == "owner"
        assert await run("keys", "compromise", "--company", "acme", "--data-dir", str(tmp_path), "--", k["kid"]) == 0
        assert await run("keys", "rewrap", "--json", "--data-dir", str(tmp_path)) == 0
        assert json.loads(capsys.readouterr().out)["rewrapped"] == 0
        assert await run("keys", "retire", "--company", "acme", "--data-dir", str(tmp_path), "--", k["kid"]) == 1
        assert (tmp_path / "keys" / "dev.kek").exists()
    finally:
        mp.undo()
        # main() configured logging onto capsys's stream; put the previous setup back
        structlog.configure(**saved_structlog)
        logging.getLogger().handlers[:] = saved_handlers


def test_kid_starting_with_dash_parses_after_double_dash():
    """Regression: RFC 7638 kids are base64url and may start with '-'; argparse read them as options."""
    from ucp_gateway.cli import build_parser

    args = build_parser().parse_args(["keys", "retire", "--company", "acme", "--", "-AbC_123"])
    assert args.kid == "-AbC_123" and args.company == "acme"

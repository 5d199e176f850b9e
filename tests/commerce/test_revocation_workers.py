"""Taking access back on a real two-process gateway (``serve --workers 2`` on one database): a
revoked staff token and a blocked platform key are refused by both workers within 5 s."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from contextlib import asynccontextmanager

from ucp_gateway.clock import SystemClock
from ucp_gateway.keys import create_admin_token

from ..test_cli import CLI, _free_port
from ..test_workers import _wait_for
from .test_ratelimit import _Conn

BOUND = 5.0  # seconds: the promise to operators (docs/operations.md "Revoking and blocking")


def _env(db_settings, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
    return env | {
        "DATABASE_URL": db_settings.database_url,
        "UCPGW_ENVIRONMENT": "development",
        "UCPGW_PUBLIC_SCHEME": "http",
        "UCPGW_DEV_PROFILE_HOSTS": '["127.0.0.1"]',
        "UCPGW_KEYS_DIR": str(tmp_path / "keys"),
        "UCPGW_WEBHOOK_WORKER": "false",
        "UCPGW_DB_POOL_MAX": "2",
        "UCPGW_LOG_LEVEL": "info",  # one access-log line per request, tagged with the worker
    }


@asynccontextmanager
async def two_workers(db_settings, tmp_path):
    """``serve --workers 2``; yields ``(run_cli, {worker: keep-alive connection to it})``."""
    log, port, env = tmp_path / "serve.log", _free_port(), _env(db_settings, tmp_path)
    args = [*CLI, "serve", "--workers", "2", "--port", str(port), "--data-dir", str(tmp_path / "gw")]
    with log.open("w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env)
    conns: list[_Conn] = []
    try:
        await asyncio.to_thread(_wait_for, log, proc, lambda e: e.get("event") == "listening" and e.get("workers"))
        # the supervisor may say so before the last worker accepts (a busy machine): wait for each
        for w in (0, 1):
            await asyncio.to_thread(_wait_for, log, proc, lambda e, w=w: e.get("event") == "listening"
                                    and e.get("worker") == w)  # fmt: skip
        on: dict[int, _Conn] = {}
        for n in range(80):  # a connection on each worker (a 404 names its worker in the log)
            conn = await _Conn(port).open()
            conns.append(conn)
            path = f"/which-worker-{n}"
            assert (await conn.get(path, {}))[0] == 404
            hit = await asyncio.to_thread(_wait_for, log, proc, lambda e, p=path: e.get("path") == p, 10)
            on.setdefault(hit["worker"], conn)
            if len(on) == 2:
                break
        assert set(on) == {0, 1}, on

        def run_cli(*argv: str) -> dict:
            out = subprocess.run([*CLI, *argv, "--json"], env=env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr[-2000:]
            return json.loads(out.stdout)

        yield run_cli, on
    finally:
        for conn in conns:
            conn.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()[-2000:]


async def _refused_within(on: dict[int, _Conn], path: str, headers: dict[str, str], status: int) -> float:
    """Seconds until every worker answers ``path`` with ``status`` (fails after BOUND)."""
    t0 = time.monotonic()
    left = set(on)
    while left:
        for w in list(left):
            if (await on[w].get(path, headers))[0] == status:
                left.discard(w)
        assert time.monotonic() - t0 < BOUND, f"workers {left} still answer after {BOUND} s"
        if left:
            await asyncio.sleep(0.05)
    return time.monotonic() - t0


async def test_a_revoked_staff_token_is_refused_by_both_workers(tmp_path, db_settings, database, company):
    token, tid = await create_admin_token(database.pool, company.id, "owner", now=SystemClock().now(), label="leak")
    bearer = {"Authorization": f"Bearer {token}"}
    async with two_workers(db_settings, tmp_path) as (run_cli, on):
        for conn in on.values():
            assert (await conn.get("/admin/v1/keys", bearer))[0] == 200
        listed = run_cli("admin-tokens", "list", "--company", company.slug)
        assert [t["state"] for t in listed if t["token_id"] == str(tid)] == ["active"]
        made = run_cli("admin-tokens", "create", "--company", company.slug, "--role", "read_only", "--expires", "1h")
        assert made["expires_at"]
        assert run_cli("admin-tokens", "revoke", "--company", company.slug, str(tid))["was_active"] is True
        await _refused_within(on, "/admin/v1/keys", bearer, 401)
        other = {"Authorization": f"Bearer {made['token']}"}
        for conn in on.values():  # the other token is untouched
            assert (await conn.get("/admin/v1/keys", other))[0] == 200


async def test_a_blocked_platform_key_is_refused_by_both_workers(tmp_path, db_settings, database, company):
    from ucp_gateway.db import tenant_tx
    from ucp_gateway.httpsig.blocks import jwk_thumbprint

    from .conftest import Platform, url
    from .sigutil import BuyerKey

    key = BuyerKey()
    platform = await Platform(signing_keys=[dict(key.jwk)]).start()
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'required' WHERE id = $1", company.id)
    path = url("/checkout-sessions/chk_nope")
    agent = {"UCP-Agent": f'profile="{platform.base}/profile/a.json"'}
    try:
        async with two_workers(db_settings, tmp_path) as (run_cli, on):
            port = next(iter(on.values())).port

            def signed() -> dict[str, str]:
                return key.sign("GET", f"http://127.0.0.1:{port}{path}", agent)

            for conn in on.values():
                assert (await conn.get(path, signed()))[0] == 200
            thumb = jwk_thumbprint(key.jwk)
            run_cli("blocks", "add", "--company", company.slug, "--kind", "thumbprint", "--reason", "leaked", thumb)
            t0 = time.monotonic()
            left = set(on)
            while left:  # every worker refuses the key within BOUND seconds (fresh signatures each time)
                for w in list(left):
                    status, _, body = await on[w].get(path, signed())
                    if status == 401:
                        assert json.loads(body)["code"] == "key_not_found"
                        left.discard(w)
                assert time.monotonic() - t0 < BOUND, f"workers {left} still accept the key after {BOUND} s"
                if left:
                    await asyncio.sleep(0.05)
            listed = run_cli("blocks", "list", "--company", company.slug)
            assert [(b["kind"], b["value"], b["reason"]) for b in listed] == [("thumbprint", thumb, "leaked")]
            run_cli("blocks", "remove", "--company", company.slug, "--kind", "thumbprint", thumb)
            await _refused_within(on, path, {}, 401)  # (unsigned stays refused: policy required)
            deadline = time.monotonic() + BOUND
            for conn in on.values():  # lifted: accepted again
                while (await conn.get(path, signed()))[0] != 200:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
    finally:
        await platform.runner.cleanup()

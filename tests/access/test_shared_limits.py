"""Rate limits shared through PostgreSQL (access/ratelimit.py): the GCRA arithmetic, the upsert
against it, leases that never let more through than the shared bucket granted, per-level and
per-principal budgets, checkout continuation (a verified platform is never refused 429 in the
middle of a checkout it may complete), and two real gateway processes on one database."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import uuid

import httpx2
import pytest

from tests.access.conftest import SHIPPING
from ucp_gateway.access.ratelimit import WINDOW, SharedLimiter, gcra, lease_cap
from ucp_gateway.appkeys import SETTINGS
from ucp_gateway.discovery.partners import add_partner
from ucp_gateway.tenancy import create_company

from ..test_cli import CLI, _free_port
from ..test_workers import _wait_for

T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
HTTP = frozenset({"127.0.0.1"})


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# --- the arithmetic (pure) ------------------------------------------------------------------------


def test_gcra_a_burst_of_the_limit_then_one_per_share_of_the_minute():
    tat, now, limit = 0.0, 1000.0, 6  # one token per 10 s
    got = []
    for _ in range(7):
        granted, tat, wait = gcra(tat, now, limit, 1)
        got.append((granted, round(wait, 6)))
    assert got == [(1, 0.0)] * 6 + [(0, 10.0)]  # a burst of 6, then the next token in 10 s
    assert gcra(tat, now + 9.9, limit, 1)[0] == 0
    assert gcra(tat, now + 10.0, limit, 1)[0] == 1
    # a grant of several tokens takes what is free, no more
    assert gcra(0.0, 1000.0, 6, 4)[:2] == (4, 1040.0)
    assert gcra(1040.0, 1000.0, 6, 4)[0] == 2
    assert lease_cap(1200) == 24 and lease_cap(6) == 1 and lease_cap(10**6) == 32


# --- the upsert against the reference ---------------------------------------------------------------


@pytest.fixture
async def company(database):
    return await create_company(database.pool, slug="lim", display_name="Lim", hostnames=["lim.example"])


async def test_the_upsert_grants_what_the_reference_grants(database, company):
    lim = SharedLimiter(lease_ttl=0, refusal_ttl=0)  # every take asks the database
    tat, steps = 0.0, [(0.0, 1)] * 5 + [(0.5, 1), (10.0, 1), (10.0, 1), (25.0, 1), (95.0, 1)]
    for t, _want in steps:
        want_granted, tat, want_wait = gcra(tat, 1000.0 + t, 5, 1)
        wait = await lim.take(database.pool, company.id, "k", 5, at=at(t))
        assert (wait == 0.0) == bool(want_granted), (t, wait)
        assert wait == pytest.approx(want_wait, abs=1e-3), t
    assert lim.db_calls == len(steps)
    # another bucket, another company: their own budgets
    assert await lim.take(database.pool, company.id, "other", 5, at=at(0)) == 0.0
    other = await create_company(database.pool, slug="lim2", display_name="L2", hostnames=["lim2.example"])
    assert await lim.take(database.pool, other.id, "k", 5, at=at(0)) == 0.0


async def test_leases_never_pass_more_than_the_shared_bucket_granted(database, company):
    """Three limiters (three processes' worth of state) on one bucket of 200 a minute: a burst
    of 300 requests, interleaved, passes at most 200 and at least 200 minus the unspent leases;
    the database is asked far less than once a request."""
    limit = 200  # lease_cap 4
    lims = [SharedLimiter() for _ in range(3)]

    async def burst(lim: SharedLimiter) -> int:
        return sum([await lim.take(database.pool, company.id, "hot", limit) == 0.0 for _ in range(100)])

    passed = sum(await asyncio.gather(*(burst(lim) for lim in lims)))
    assert limit - 3 * (lease_cap(limit) - 1) <= passed <= limit, passed
    calls = sum(lim.db_calls for lim in lims)
    assert calls < 300 * 0.6, calls  # leases and the remembered refusals spare most round trips


async def test_a_lease_is_spent_only_within_its_life(database, company):
    clock = [0.0]
    lim = SharedLimiter(lease_ttl=2.0, refusal_ttl=0, clock=lambda: clock[0])
    for _ in range(8):  # 1, 2, 4 ... doubling while each lease is spent at once
        assert await lim.take(database.pool, company.id, "k", 1000) == 0.0
    calls = lim.db_calls
    assert calls <= 4, calls
    clock[0] = 5.0  # every lease has ended: the next take asks again
    assert await lim.take(database.pool, company.id, "k", 1000) == 0.0
    assert lim.db_calls == calls + 1


# --- budgets per level and per principal, and checkout continuation, over HTTP ---------------------


async def _http(method: str, url: str, **kw) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.request(method, url, **kw)


async def test_a_verified_platform_is_never_refused_in_the_middle_of_its_checkout(shop):
    """Budget of 3 a minute for identified principals (company setting), 2 for anonymous callers.
    A platform with an API key starts a checkout and spends its budget; new work is 429 with
    Retry-After and the UCP error body, but every update, read and the complete of ITS open
    checkout go through. An anonymous caller, or another platform, naming that checkout is refused."""
    await add_partner(shop.pool, shop.company.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)
    other_profile = shop.platform.base + "/profile/b.json"
    await add_partner(shop.pool, shop.company.id, profile_url=other_profile, role="buyer", http_hosts=HTTP)
    await shop.set("UPDATE companies SET settings = jsonb_set(settings, '{access}', "
                   "'{\"rate_limits\": {\"identified\": 3, \"anonymous\": 2}}') WHERE id = $1")  # fmt: skip
    admin = {"Authorization": f"Bearer {shop.admin}"}
    keys = {}
    for p in (shop.profile, other_profile):
        r = await _http("POST", shop.base + "/admin/v1/partners/credentials", headers=admin,
                        json={"kind": "api-key", "profile_url": p})  # fmt: skip
        keys[p] = r.json()["secret"]
    me = {"X-API-Key": keys[shop.profile], "UCP-Agent": f'profile="{shop.profile}"'}
    rest = shop.base + "/ucp/v1/checkout-sessions"
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    r = await _http("POST", rest, json=create, headers=me)
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    assert (await _http("POST", rest, json=create, headers=me)).status_code == 201
    assert (await _http("GET", f"{rest}/{cid}", headers=me)).status_code == 200  # the third token
    r = await _http("POST", rest, json=create, headers=me)  # new work, budget spent
    assert r.status_code == 429 and r.json()["code"] == "rate_limited", r.text
    assert 1 <= int(r.headers["Retry-After"]) <= 20
    # ... but its own checkout goes on: update to ready, read, complete
    upd = {**create, "fulfillment": SHIPPING}
    r = await _http("PUT", f"{rest}/{cid}", json=upd, headers=me)
    assert r.status_code == 200, r.text
    group = r.json()["fulfillment"]["methods"][0]["groups"][0]
    chosen = [{"id": group["id"], "selected_option_id": group["options"][0]["id"]}]
    upd["fulfillment"] = {"methods": [{**SHIPPING["methods"][0], "groups": chosen}]}
    r = await _http("PUT", f"{rest}/{cid}", json=upd, headers=me)
    assert r.status_code == 200 and r.json()["status"] == "ready_for_complete", r.text
    assert (await _http("GET", f"{rest}/{cid}", headers=me)).status_code == 200
    pay = {"payment": {"instruments": [{"id": "i1", "handler_id": "mock_payment_handler", "type": "card",
                                        "credential": {"type": "token", "token": "success_token"}}]}}  # fmt: skip
    r = await _http("POST", f"{rest}/{cid}/complete", json=pay, headers={**me, "Idempotency-Key": str(uuid.uuid4())})
    assert r.status_code == 200 and r.json()["status"] == "completed", r.text
    # the same over MCP (the tools name the checkout by arguments.id)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_checkout", "arguments": {
        "meta": {"ucp-agent": {"profile": shop.profile}}, "id": cid}}}  # fmt: skip
    mcp_h = {**me, "Accept": "application/json, text/event-stream"}
    r = await _http("POST", shop.base + "/ucp/mcp", json=call, headers=mcp_h)
    assert r.status_code == 200 and "error" not in r.json(), r.text
    call["params"] = {"name": "create_checkout", "arguments": {"meta": {"ucp-agent": {"profile": shop.profile}},
                                                               "checkout": create}}  # fmt: skip
    r = await _http("POST", shop.base + "/ucp/mcp", json=call, headers=mcp_h)
    assert r.status_code == 429 and r.json()["error"]["data"]["code"] == "rate_limited", r.text
    assert int(r.headers["Retry-After"]) >= 1 and r.json()["error"]["data"]["retry_after"] >= 1
    # another platform (its own budget of 3) cannot ride on this checkout once its budget is spent
    other = {"X-API-Key": keys[other_profile], "UCP-Agent": f'profile="{other_profile}"'}
    statuses = [(await _http("GET", f"{rest}/{cid}", headers=other)).status_code for _ in range(4)]
    assert statuses[-1] == 429, statuses
    # anonymous callers share their own budget of 2 and never continue a checkout past it
    anon = {"UCP-Agent": f'profile="{shop.profile}"'}
    await shop.policy("optional")
    statuses = [(await _http("GET", f"{rest}/{cid}", headers=anon)).status_code for _ in range(3)]
    assert statuses[-1] == 429, statuses


async def test_a_runaway_loop_on_one_checkout_is_shed_with_503(shop):
    """Past its own allowance (checkout_session_rate_limit) a continued checkout is shed with 503
    and Retry-After, never 429."""
    await add_partner(shop.pool, shop.company.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)
    await shop.set("UPDATE companies SET settings = jsonb_set(settings, '{access}', "
                   "'{\"rate_limits\": {\"identified\": 1}}') WHERE id = $1")  # fmt: skip
    shop.app[SETTINGS].checkout_session_rate_limit = 2
    r = await _http("POST", shop.base + "/admin/v1/partners/credentials",
                    headers={"Authorization": f"Bearer {shop.admin}"},
                    json={"kind": "api-key", "profile_url": shop.profile})  # fmt: skip
    me = {"X-API-Key": r.json()["secret"], "UCP-Agent": f'profile="{shop.profile}"'}
    rest = shop.base + "/ucp/v1/checkout-sessions"
    r = await _http("POST", rest, json={"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}, headers=me)
    cid = r.json()["id"]
    answers = [await _http("GET", f"{rest}/{cid}", headers=me) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 503], [a.text for a in answers]
    assert answers[-1].json()["code"] == "unavailable" and int(answers[-1].headers["Retry-After"]) >= 1


# --- two real gateway processes on one database ------------------------------------------------------

LIMIT = 5


def _serve(db_settings, tmp_path, name: str):
    log, port = tmp_path / f"{name}.log", _free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
    env |= {
        "DATABASE_URL": db_settings.database_url,
        "UCPGW_ENVIRONMENT": "development",
        "UCPGW_PUBLIC_SCHEME": "http",
        "UCPGW_DEV_PROFILE_HOSTS": '["127.0.0.1"]',
        "UCPGW_KEYS_DIR": str(tmp_path / "keys"),
        "UCPGW_WEBHOOK_WORKER": "false",
        "UCPGW_DB_POOL_MAX": "3",
        "UCPGW_LOG_LEVEL": "info",
        "UCPGW_BUYER_RATE_LIMIT": str(LIMIT),
        "UCPGW_RETENTION_INTERVAL": "0",
    }
    args = [*CLI, "serve", "--port", str(port), "--data-dir", str(tmp_path / name)]
    with log.open("w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env)
    return proc, port, log


async def test_two_gateway_processes_on_one_database_share_every_limit(tmp_path, db_settings, shop):
    """Two separate ``serve`` processes (two replicas, each its own port and caches) on the shop's
    database: one platform with an API key gets LIMIT requests across both, not LIMIT each; the
    anonymous budget (company setting 3) is one across both too."""
    await add_partner(shop.pool, shop.company.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)
    r = await _http("POST", shop.base + "/admin/v1/partners/credentials",
                    headers={"Authorization": f"Bearer {shop.admin}"},
                    json={"kind": "api-key", "profile_url": shop.profile})  # fmt: skip
    key = r.json()["secret"]
    await shop.policy("optional")  # anonymous callers are served, on one budget of 3 a minute
    await shop.set("UPDATE companies SET settings = jsonb_set(settings, '{access}', "
                   "'{\"rate_limits\": {\"anonymous\": 3}}') WHERE id = $1")  # fmt: skip
    procs = [_serve(db_settings, tmp_path, n) for n in ("a", "b")]
    try:
        for proc, _port, log in procs:
            await asyncio.to_thread(_wait_for, log, proc, lambda e: e.get("event") == "listening", 60)
        me = {"X-API-Key": key, "UCP-Agent": f'profile="{shop.profile}"', "Host": "127.0.0.1"}
        path = "/ucp/v1/checkout-sessions/chk_missing"

        async def hammer(port: int, headers: dict, n: int) -> list[httpx2.Response]:
            async with httpx2.AsyncClient(timeout=30) as http:
                return [await http.get(f"http://127.0.0.1:{port}{path}", headers=headers) for _ in range(n)]

        ports = [p for _, p, _ in procs]
        out = [a for rs in await asyncio.gather(*(hammer(p, me, LIMIT) for p in ports)) for a in rs]
        statuses = [a.status_code for a in out]
        # served (a not_found checkout, answered 200 with its error) LIMIT times across both, refused after
        assert statuses.count(200) == LIMIT and statuses.count(429) == LIMIT, statuses
        for a in out:
            if a.status_code == 429:
                assert a.json()["code"] == "rate_limited" and 1 <= int(a.headers["Retry-After"]) <= 12
        # the anonymous budget, one across both processes
        anon = {"UCP-Agent": f'profile="{shop.profile}"', "Host": "127.0.0.1"}
        out = [a for rs in await asyncio.gather(*(hammer(p, anon, 3) for p in ports)) for a in rs]
        assert [a.status_code for a in out].count(429) == 3, [a.status_code for a in out]
    finally:
        for proc, _, _ in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, _, log in procs:
            proc.wait(timeout=60)
            assert proc.returncode == 0, log.read_text()[-2000:]


def test_window_is_a_minute():
    assert WINDOW == 60.0


def test_a_company_rate_limit_table_is_checked_where_it_is_written_and_read():
    from types import SimpleNamespace

    from ucp_gateway.commerce.budget import bucket_of, limits_for
    from ucp_gateway.company_settings import check_settings
    from ucp_gateway.config import Settings
    from ucp_gateway.errors import BadRequest

    check_settings({"access": {"rate_limits": {"anonymous": 60, "identified": 600, "linked": None}}})
    for bad in ({"anonymous": 0}, {"identified": -1}, {"identified": True}, {"identified": 1.5}, {"gold": 5},
                {"identified": 10**7 + 1}, []):  # fmt: skip
        with pytest.raises(BadRequest, match="rate_limits"):
            check_settings({"access": {"rate_limits": bad}})
    s = Settings(buyer_rate_limit=100)
    co = SimpleNamespace(id=uuid.uuid4(), slug="x", settings={"access": {"rate_limits": {"anonymous": 7}}})
    assert limits_for(co, s) == {"anonymous": 7, "identified": 100, "linked": 100}
    assert limits_for(SimpleNamespace(id=uuid.uuid4(), slug="y", settings={}), s)["anonymous"] == 100
    # an unreadable table (an operator's SQL) reads as the platform's limits
    co = SimpleNamespace(id=uuid.uuid4(), slug="z", settings={"access": {"rate_limits": {"anonymous": "lots"}}})
    assert limits_for(co, s) == {"anonymous": 100, "identified": 100, "linked": 100}
    # buckets: a verified principal its own, everyone else the shared anonymous one
    verified = SimpleNamespace(profile_url="https://p.example/a.json", authenticated=True, level="identified")
    claimed = SimpleNamespace(profile_url="https://p.example/a.json", authenticated=False, level="anonymous")
    assert bucket_of(verified) == ("p:https://p.example/a.json", "identified", "https://p.example/a.json")
    assert bucket_of(claimed)[0] == bucket_of(None)[0] == "anonymous"

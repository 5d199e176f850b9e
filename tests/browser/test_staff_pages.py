"""The staff pages in a real browser: a person signs in with a staff token, confirms a human-only
verb another credential asked for (it runs once), rotates a key and marks one compromised (the
profile shows each within profile_render_ttl); the CSRF token is required; signing out ends it."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from urllib.parse import urlsplit

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.keys.admin_tokens import create_admin_token
from ucp_gateway.keys.pages import compromise_phrase

from ..commerce.conftest import make_app, started

REFUND = {"order_id": "ord_1", "amount": 100, "currency": "USD"}
RENDER_TTL = 1.0  # profile_render_ttl of these tests: the documented bound of a key change's delay


@pytest.fixture
async def gateway(aiohttp_client, database, db_settings, company, platform):
    app = make_app(database, db_settings, profile_render_ttl=RENDER_TTL)
    return await started(aiohttp_client, app, database, company)


async def _token(database, company, role: str, label: str) -> str:
    token, _ = await create_admin_token(database.pool, company.id, role, now=dt.datetime.now(dt.UTC), label=label)
    return token


async def _sign_in(browser, token: str, path: str = "/admin/keys") -> None:
    await browser.get(path)
    assert "/admin/sign-in?next=" in await browser.url()
    await browser.type("#token", token)
    await browser.submit("#sign-in", path)


async def _dispatch(gateway, token: str, **body) -> dict:
    r = await gateway.post(
        "/api/v1/agent/dispatch", json={"verb": "payments.refund", "args": REFUND, **body},
        headers={"Authorization": f"Bearer {token}"},
    )  # fmt: skip
    return await r.json()


async def _refunded(database, company) -> int:
    async with tenant_tx(database.pool, company.id) as conn:
        return await conn.fetchval("SELECT refunded_amount FROM sales_orders WHERE id = 'ord_1'")


async def test_a_person_confirms_what_a_token_asked_and_it_runs_once(gateway, browser_for, database, company):
    agent = await _token(database, company, "admin", "agent")
    pre = await _dispatch(gateway, agent)
    assert pre["error"]["reason"] == "dispatch_pending" and pre["pending"]["confirm"] == "human", pre
    own = await _dispatch(gateway, agent, confirm=True, typed_phrase=pre["pending"]["required_phrase"])
    assert own["error"]["reason"] == "consent_channel_required"
    before = await _refunded(database, company)
    path = urlsplit(pre["pending"]["approval_url"]).path

    browser = browser_for(gateway)
    await _sign_in(browser, await _token(database, company, "owner", "person"), path)
    main = await browser.text()
    assert "payments.refund" in main and "ord_1" in main and "via http" in main
    await browser.screenshot("staff_approval_page")
    phrase = await browser.text(".phrase")
    assert phrase == pre["pending"]["required_phrase"]
    page_html = await browser.source()
    assert "ucpat_" not in page_html and "ucpss_" not in page_html  # no token on any page
    await browser.type("#typed_phrase", phrase)
    await browser.submit("#approve", path)
    main = await browser.text()
    await browser.screenshot("staff_approval_done")
    assert "ran once" in main and "EXECUTED" in main.upper()
    assert await _refunded(database, company) == before + 100

    # the same form again runs nothing: the approval is closed
    cookies = await browser.cookies()
    csrf = await browser.value("input[name=csrf_token]")
    r = await gateway.post(path, data={"csrf_token": csrf, "typed_phrase": phrase, "nonce": "x"}, cookies=cookies)
    assert r.status == 409
    assert await _refunded(database, company) == before + 100


async def test_the_token_that_asked_cannot_approve_in_its_own_session(gateway, browser_for, database, company):
    agent = await _token(database, company, "owner", "agent")
    pre = await _dispatch(gateway, agent)
    path = urlsplit(pre["pending"]["approval_url"]).path
    browser = browser_for(gateway)
    await _sign_in(browser, agent, path)  # the agent's token opens a session: still the same caller
    assert "another person must confirm" in await browser.text()
    assert await browser.find_all("#approve") == []
    csrf = await browser.value("input[name=csrf_token]")
    r = await gateway.post(path, data={"csrf_token": csrf, "typed_phrase": "x", "nonce": "x"},
                           cookies=await browser.cookies())  # fmt: skip
    assert r.status == 403


async def _profile_kids(gateway) -> set[str]:
    r = await gateway.get("/.well-known/ucp")
    doc = await r.json()
    return {k["kid"] for k in doc.get("signing_keys") or []}


async def _within_render_ttl(gateway, predicate) -> float:
    """Seconds until the profile satisfies ``predicate``; fails past RENDER_TTL (+ a scheduling margin)."""
    t0 = time.monotonic()
    while True:
        kids = await _profile_kids(gateway)
        if predicate(kids):
            return time.monotonic() - t0
        assert time.monotonic() - t0 < RENDER_TTL + 1.0, kids
        await asyncio.sleep(0.1)


async def test_admin_rotates_and_marks_a_key_compromised(gateway, browser_for, database, company):
    browser = browser_for(gateway)
    await _sign_in(browser, await _token(database, company, "owner", "admin person"))
    await browser.screenshot("staff_keys_page")
    old = await _profile_kids(gateway)
    assert len(old) == 1
    (active,) = old
    assert active in await browser.text() and "ACTIVE" in (await browser.text()).upper()

    await browser.submit("#rotate", "/admin/keys?done=rotated")
    main = await browser.text()
    assert "PENDING" in main.upper() and "activates at" in main
    await _within_render_ttl(gateway, lambda kids: len(kids) == 2 and active in kids)  # the new key is published
    (new,) = (await _profile_kids(gateway)) - {active}
    assert new in main

    row = f"#key-{active[:8]}"
    await browser.click(f"{row} summary")
    await browser.type(f"#phrase-{active[:8]}", "COMPROMISE wrong")
    await browser.submit(f"{row} button.danger", "/admin/keys?problem=", prefix=True)
    assert f'type exactly "{compromise_phrase(active)}"' in await browser.text()
    assert active in await _profile_kids(gateway)
    await browser.click(f"{row} summary")
    await browser.type(f"#phrase-{active[:8]}", compromise_phrase(active))
    await browser.submit(f"{row} button.danger", "/admin/keys?done=compromised")
    assert "no longer published" in await browser.text()
    await browser.screenshot("staff_keys_compromised")
    assert "COMPROMISED" in (await browser.text(row)).upper()
    await _within_render_ttl(gateway, lambda kids: active not in kids and new in kids)
    events = await browser.text("main")
    assert "compromised (admin page)" in events and "rotate (admin page)" in events


async def test_staff_forms_need_the_csrf_token_and_sign_out_ends_the_session(gateway, browser_for, database, company):
    browser = browser_for(gateway)
    await _sign_in(browser, await _token(database, company, "owner", "p"))
    cookies = await browser.cookies()
    r = await gateway.post("/admin/keys/rotate", data={}, cookies=cookies, allow_redirects=False)
    assert r.status == 403 and r.headers["Cache-Control"] == "no-store"
    r = await gateway.post("/admin/keys/rotate", data={"csrf_token": "A" * 43}, cookies=cookies, allow_redirects=False)
    assert r.status == 403
    csrf = await browser.value("input[name=csrf_token]")
    r = await gateway.post("/admin/keys/rotate", data={"csrf_token": csrf}, cookies=cookies, allow_redirects=False,
                           headers={"Sec-Fetch-Site": "cross-site"})  # fmt: skip
    assert r.status == 403
    assert len(await _profile_kids(gateway)) == 1  # nothing rotated
    session = cookies["ucpgw_staff"]
    await browser.submit("nav button", "/admin/sign-in")
    r = await gateway.get("/admin/keys", cookies={"ucpgw_staff": session}, allow_redirects=False)
    assert r.status == 303 and r.headers["Location"].startswith("/admin/sign-in")
    # a wrong token does not sign in, and says so without echoing it
    await browser.get("/admin/sign-in")
    await browser.type("#token", "ucpat_" + "0" * 32 + "_" + "x" * 43)
    await browser.click("#sign-in")
    await asyncio.sleep(0.3)
    assert "does not sign in" in await browser.text() and "xxxxxxxx" not in await browser.source()


async def test_an_owner_lists_and_revokes_a_staff_token_and_its_sessions_end(gateway, browser_for, database, company):
    agent = await _token(database, company, "admin", "agent token")
    browser = browser_for(gateway)
    await _sign_in(browser, await _token(database, company, "owner", "owner person"), "/admin/tokens")
    main = await browser.text()
    await browser.screenshot("staff_tokens_page")
    assert "agent token" in main and "owner person" in main and "ucpat_" not in await browser.source()
    agent_id = next(r[0] for r in await _token_ids(database, company) if r[1] == "agent token")
    r = await gateway.get("/admin/v1/keys", headers={"Authorization": f"Bearer {agent}"})
    assert r.status == 200
    await browser.submit(f"#token-{agent_id[:8]} button.danger", "/admin/tokens?done=revoked")
    assert "REVOKED" in (await browser.text(f"#token-{agent_id[:8]}")).upper()
    r = await gateway.get("/admin/v1/keys", headers={"Authorization": f"Bearer {agent}"})
    assert r.status == 401  # the revoked token opens nothing


async def _token_ids(database, company) -> list[tuple[str, str]]:
    async with tenant_tx(database.pool, company.id) as conn:
        return [(str(r["id"]), r["label"]) for r in await conn.fetch("SELECT id, label FROM admin_tokens")]


async def test_admin_schedules_an_activation_and_the_scheduler_activates_it_then(gateway, browser_for, database,
                                                                                 company, db_settings):  # fmt: skip
    from ucp_gateway.keys import list_keys
    from ucp_gateway.keys.scheduler import run_once

    browser = browser_for(gateway)
    await _sign_in(browser, await _token(database, company, "admin", "admin person"))
    (active,) = await _profile_kids(gateway)
    await browser.submit("#rotate", "/admin/keys?done=rotated")
    await _within_render_ttl(gateway, lambda kids: len(kids) == 2)
    (new,) = (await _profile_kids(gateway)) - {active}
    row = f"#key-{new[:8]}"
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).replace(second=0, microsecond=0)
    await browser.click(f"{row} summary")
    field = await browser.find(f"#at-{new[:8]}")  # a datetime-local field: its value set as the browser would
    await browser._run(browser.driver.execute_script, "arguments[0].value = arguments[1]", field,
                       at.strftime("%Y-%m-%dT%H:%M"))  # fmt: skip
    await browser.submit(f"#schedule-{new[:8]}", "/admin/keys?done=scheduled")
    await browser.screenshot("staff_keys_scheduled")
    main = await browser.text()
    assert f"activates at {at:%Y-%m-%d %H:%M:%S} UTC (scheduled)" in main and "activation scheduled" in main
    pub, grace = db_settings.keys_publish_min, db_settings.keys_rotating_grace
    await run_once(database.pool, now=at - dt.timedelta(seconds=1), publish_min=pub, rotating_grace=grace)
    states = {k.kid: k.state.value for k in await list_keys(database.pool, company.id)}
    assert states[new] == "pending"  # not before its time
    await run_once(database.pool, now=at, publish_min=pub, rotating_grace=grace)
    states = {k.kid: k.state.value for k in await list_keys(database.pool, company.id)}
    assert states == {active: "rotating", new: "active"}
    await browser.get("/admin/keys")
    assert "scheduled activation" in await browser.text() and "ACTIVE" in (await browser.text(row)).upper()
    # a key that is no longer pending is refused, and the page says so
    cookies, csrf = await browser.cookies(), await browser.value("input[name=csrf_token]")
    form = {"csrf_token": csrf, "activate_at": "2030-01-01T00:00"}
    r = await gateway.post(f"/admin/keys/{active}/schedule", data=form, cookies=cookies, allow_redirects=False)
    assert r.status == 303 and "problem=" in r.headers["Location"]
    r = await gateway.post(f"/admin/keys/{new}/schedule", data={"activate_at": "2030-01-01T00:00"}, cookies=cookies,
                           allow_redirects=False)  # fmt: skip
    assert r.status == 403  # no CSRF token

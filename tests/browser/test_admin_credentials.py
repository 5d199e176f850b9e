"""The platform credentials page in a real browser: an admin sees the partners' credentials (never a
secret), revokes one (the API key then proves nothing); the CSRF token and the admin role are
required; the page answers with the private-page headers."""

from __future__ import annotations

import datetime as dt

from ucp_gateway.access.credentials import add_credential, find_api_key
from ucp_gateway.discovery.partners import add_partner

from .test_staff_pages import _sign_in, _token, gateway  # noqa: F401 - the fixture

PROFILE = "https://agent.example/profile.json"


async def _credentials(database, company):
    await add_partner(database.pool, company.id, profile_url=PROFILE, role="buyer")
    now = dt.datetime.now(dt.UTC)
    key, secret = await add_credential(database.pool, company.id, kind="api-key", profile_url=PROFILE, now=now,
                                       label="checkout bot")  # fmt: skip
    client, client_secret = await add_credential(database.pool, company.id, kind="oauth-client",
                                                 profile_url=PROFILE, now=now, label="oauth bot")  # fmt: skip
    return key, secret, client, client_secret


async def test_an_admin_lists_and_revokes_a_platform_credential(gateway, browser_for, database, company):  # noqa: F811
    key, secret, client, client_secret = await _credentials(database, company)
    assert await find_api_key(database.pool, company.id, secret) is not None
    browser = browser_for(gateway)
    await _sign_in(browser, await _token(database, company, "admin", "admin person"), "/admin/credentials")
    main = await browser.text()
    await browser.screenshot("staff_credentials_page")
    assert key.id in main and client.id in main and "checkout bot" in main and PROFILE in main
    html = await browser.source()
    assert secret not in html and client_secret not in html and "ucpak_" not in html and "ucpcs_" not in html
    await browser.submit(f"#revoke-{key.id}", f"/admin/credentials?done={key.id}")
    assert "REVOKED" in (await browser.text(f"#cred-{key.id}")).upper()
    assert "LIVE" in (await browser.text(f"#cred-{client.id}")).upper()
    assert await find_api_key(database.pool, company.id, secret) is None  # the key proves nothing now
    await browser.screenshot("staff_credentials_revoked")


async def test_revoking_needs_the_csrf_token_and_the_admin_role(gateway, browser_for, database, company):  # noqa: F811
    key, secret, _, _ = await _credentials(database, company)
    browser = browser_for(gateway)
    await _sign_in(browser, await _token(database, company, "read_only", "viewer"), "/admin/credentials")
    assert key.id in await browser.text() and await browser.find_all(f"#revoke-{key.id}") == []
    cookies = await browser.cookies()
    csrf = await browser.value("nav input[name=csrf_token]")
    path = f"/admin/credentials/{key.id}/revoke"
    r = await gateway.post(path, data={"csrf_token": csrf}, cookies=cookies, allow_redirects=False)
    assert r.status == 403 and "admin role" in await r.text()  # read_only may look, not revoke
    r = await gateway.get("/admin/credentials", cookies=cookies)
    assert r.headers["Cache-Control"] == "no-store" and r.headers["Referrer-Policy"] == "no-referrer"
    assert "default-src 'none'" in r.headers["Content-Security-Policy"]

    browser = browser_for(gateway)  # cookies cleared: another person
    await _sign_in(browser, await _token(database, company, "admin", "admin"), "/admin/credentials")
    cookies = await browser.cookies()
    r = await gateway.post(path, data={}, cookies=cookies, allow_redirects=False)
    assert r.status == 403  # no CSRF token
    csrf = await browser.value("nav input[name=csrf_token]")
    r = await gateway.post(path, data={"csrf_token": csrf}, cookies=cookies, allow_redirects=False,
                           headers={"Sec-Fetch-Site": "cross-site"})  # fmt: skip
    assert r.status == 403
    assert await find_api_key(database.pool, company.id, secret) is not None  # nothing revoked
    r = await gateway.post("/admin/credentials/ak_nope/revoke", data={"csrf_token": csrf}, cookies=cookies,
                           allow_redirects=False)  # fmt: skip
    assert r.status == 404

"""Every page people open, in a real browser: a screenshot of each (test-artifacts/), the
private-page headers on each (no-store, no-referrer, a CSP without scripts, never framed), and no
private key, token, payment credential or card number in any of them."""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import urlsplit

from ucp_gateway.access.credentials import add_credential
from ucp_gateway.discovery.partners import add_partner

from ..commerce.conftest import SHIP_US, headers, new_key, pay, payload, url
from .test_staff_pages import _dispatch, _sign_in, _token, gateway  # noqa: F401 - the fixture

_SECRETS = re.compile(r'ucpat_|ucpak_|ucpcs_|ucpss_|success_token|fail_token|"d"\s*:|(?<![\w-])\d{13,19}(?![\w-])')


def _private(resp) -> None:
    assert resp.headers["Cache-Control"] == "no-store", resp.url
    assert resp.headers["Referrer-Policy"] == "no-referrer", resp.url
    csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp, resp.url
    assert resp.headers["X-Frame-Options"] == "DENY" and resp.headers["X-Content-Type-Options"] == "nosniff"


async def _visit(browser, client, name: str, path: str) -> str:
    """Open ``path`` in the browser, save its screenshot, check its headers and its source."""
    await browser.get(path)
    await browser.screenshot(f"page_{name}")
    html = await browser.source()
    found = _SECRETS.search(html)
    assert found is None, (path, found and found.group(0))
    r = await client.get(path, cookies=await browser.cookies(), allow_redirects=False)
    _private(r)
    return html


async def test_every_page_is_private_and_shows_no_secret(gateway, browser_for, database, company):  # noqa: F811
    r = await gateway.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    co = await r.json()
    r = await gateway.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    done = await r.json()
    r = await gateway.post(url(f"/checkout-sessions/{done['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    done = await r.json()
    assert done["status"] == "completed", done
    await add_partner(database.pool, company.id, profile_url="https://agent.example/p.json", role="buyer")
    await add_credential(database.pool, company.id, kind="api-key", profile_url="https://agent.example/p.json",
                         now=dt.datetime.now(dt.UTC), label="bot")  # fmt: skip
    agent = await _token(database, company, "admin", "agent")
    approval = urlsplit((await _dispatch(gateway, agent))["pending"]["approval_url"]).path

    browser = browser_for(gateway)
    pages = {
        "shop_home": "/",
        "terms": "/terms",
        "privacy": "/privacy",
        "checkout": urlsplit(co["continue_url"]).path,
        "checkout_completed": f"/checkout-sessions/{done['id']}",
        "order": urlsplit(done["order"]["permalink_url"]).path,
        "not_found": "/orders/ord_nope",
        "staff_sign_in": "/admin/sign-in",
    }
    for name, path in pages.items():
        await _visit(browser, gateway, name, path)
    await _sign_in(browser, await _token(database, company, "owner", "person"))
    staff = {
        "staff_keys": "/admin/keys",
        "staff_tokens": "/admin/tokens",
        "staff_credentials": "/admin/credentials",
        "staff_approvals": "/admin/approvals",
        "staff_approval": approval,
    }
    for name, path in staff.items():
        html = await _visit(browser, gateway, name, path)
        assert "Sign out" in html, path  # the session's page, not the sign-in form
    # a refused form is a page too, with the same headers
    r = await gateway.post("/admin/keys/rotate", data={}, cookies=await browser.cookies(), allow_redirects=False)
    assert r.status == 403
    _private(r)
    assert _SECRETS.search(await r.text()) is None

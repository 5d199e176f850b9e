"""The buyer's confirmation page at an escalated checkout's continue_url, in a real browser: the
buyer reviews and confirms, the agent then completes; refused: a replayed or wrong confirmation
token, a form without the CSRF token, a form from another site, a checkout changed after the page."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.htmlpage import format_money

from ..commerce.conftest import SHIP_US, headers, make_app, new_key, pay, payload, started, url

LIMIT = 1000  # minor units: every demo bouquet with shipping is above it


@pytest.fixture
async def shop(aiohttp_client, database, db_settings, company, platform):
    return await started(
        aiohttp_client, make_app(database, db_settings, buyer_max_order_amount=LIMIT), database, company
    )


async def _escalated(shop) -> dict:
    """A checkout whose complete the agent may not finish alone: total above its limit."""
    r = await shop.post(
        url("/checkout-sessions"),
        json=payload(fulfillment=SHIP_US, buyer={"email": "jane.buyer@example.com"}),
        headers=headers(key=new_key()),
    )
    co = await r.json()
    assert r.status == 201, co
    r = await shop.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    body = await r.json()
    assert body["status"] == "requires_escalation", body
    assert any(m["code"] == "amount_limit_exceeded" for m in body["messages"])
    return body


def _page_headers(resp) -> None:
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.headers["Referrer-Policy"] == "no-referrer"
    csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp


async def test_buyer_confirms_on_the_page_and_the_agent_completes(shop, browser_for):
    co = await _escalated(shop)
    path = urlsplit(co["continue_url"]).path
    browser = browser_for(shop)
    await browser.get(path)
    await browser.screenshot("buyer_confirmation_page")
    main = await browser.text()
    total = next(t["amount"] for t in co["totals"] if t["type"] == "total")
    assert "Confirm your order" in main and "What needs you" in main
    assert "above this agent's limit" in main  # the escalation reason, from the checkout's messages
    assert co["line_items"][0]["item"]["title"] in main and format_money(total, "USD") in main
    assert "Flower Shop" in main and "Terms of service" in main
    assert "jane.buyer@example.com" not in main and "62704" not in main and "success_token" not in main
    # the stylesheet loads under the page's CSP (no inline style): the button has its colour
    bg = await browser.css("#confirm-button", "background-color")
    assert bg.replace(" ", "") in ("rgba(11,87,208,1)", "rgb(11,87,208)")

    await browser.click("#agree")
    await browser.submit("#confirm-button", path + "?confirmed=1")
    main = await browser.text()
    await browser.screenshot("buyer_confirmation_done")
    assert "you confirmed this order" in main and "ready to pay" in main

    # the agent sees the new state on its next call, and completes
    r = await shop.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    assert (await r.json())["status"] == "ready_for_complete"
    r = await shop.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    done = await r.json()
    assert done["status"] == "completed" and done["order"]["id"], done
    await browser.get(path)
    assert "This checkout is complete." in await browser.text()


async def test_the_page_answers_with_the_private_page_headers(shop):
    co = await _escalated(shop)
    r = await shop.get(urlsplit(co["continue_url"]).path)
    assert r.status == 200
    _page_headers(r)
    r = await shop.get("/assets/site.css")
    assert r.status == 200 and r.content_type == "text/css"


async def _form(browser, path) -> dict[str, str]:
    await browser.get(path)
    return {
        "confirmation_token": await browser.value("input[name=confirmation_token]"),
        "csrf_token": await browser.value("input[name=csrf_token]"),
        "cookie": (await browser.cookies())["ucpgw_csrf"],
    }


async def _post(shop, path, form, *, cookie=True, headers=None, **extra):
    data = {"confirmation_token": form["confirmation_token"], "csrf_token": form["csrf_token"], "agree": "yes", **extra}
    data = {k: v for k, v in data.items() if v is not None}
    cookies = {"ucpgw_csrf": form["cookie"]} if cookie else {}
    return await shop.post(path + "/confirm", data=data, cookies=cookies, headers=headers, allow_redirects=False)


async def test_a_replayed_or_wrong_confirmation_is_refused(shop, browser_for, database, company):
    co = await _escalated(shop)
    path = urlsplit(co["continue_url"]).path
    browser = browser_for(shop)
    form = await _form(browser, path)
    r = await _post(shop, path, {**form, "confirmation_token": "A" * 43})
    assert r.status == 409 and "not valid" in await r.text()
    r = await _post(shop, path, form)
    assert r.status == 303
    r = await _post(shop, path, form)  # the same token again
    assert r.status == 409 and "already used" in await r.text()
    _page_headers(r)
    # a token of another checkout does not confirm this one
    other = await _escalated(shop)
    opath = urlsplit(other["continue_url"]).path
    oform = await _form(browser, opath)
    r = await _post(shop, path, oform)
    assert r.status == 409
    async with tenant_tx(database.pool, company.id) as conn:
        n = await conn.fetchval("SELECT count(*) FROM checkout_confirmations WHERE checkout_id = $1", other["id"])
    assert n == 0


async def test_the_csrf_token_is_required(shop, browser_for):
    co = await _escalated(shop)
    path = urlsplit(co["continue_url"]).path
    browser = browser_for(shop)
    form = await _form(browser, path)
    r = await _post(shop, path, form, cookie=False)  # no cookie
    assert r.status == 403 and "security check" in await r.text()
    r = await _post(shop, path, {**form, "csrf_token": None})  # no field
    assert r.status == 403
    r = await _post(shop, path, {**form, "csrf_token": "B" * 43})  # field and cookie differ
    assert r.status == 403
    r = await shop.post(
        path + "/confirm",
        data={**{k: form[k] for k in ("confirmation_token", "csrf_token")}, "agree": "yes"},
        cookies={"ucpgw_csrf": form["cookie"]},
        headers={"Origin": "https://evil.example"},  # a browser without Fetch Metadata
        allow_redirects=False,
    )
    assert r.status == 403 and "another site" in await r.text()
    r = await _post(shop, path, form, headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status == 403
    r = await _post(shop, path, form, agree=None)
    assert r.status == 400
    # none of those spent the token: the buyer's own submission still works
    r = await _post(shop, path, form)
    assert r.status == 303


async def test_a_checkout_changed_after_the_page_needs_a_new_confirmation(shop, browser_for):
    co = await _escalated(shop)
    path = urlsplit(co["continue_url"]).path
    browser = browser_for(shop)
    form = await _form(browser, path)
    # the agent changes the quantity while the buyer reads the page
    r = await shop.put(
        url(f"/checkout-sessions/{co['id']}"), json=payload(qty=2, fulfillment=SHIP_US), headers=headers(key=new_key())
    )
    assert r.status == 200
    r = await shop.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    assert (await r.json())["status"] == "requires_escalation"
    r = await _post(shop, path, form)
    assert r.status == 409 and "changed" in await r.text()


async def test_an_anonymous_agents_checkout_is_finished_by_the_buyer_on_the_page(shop, browser_for, database, company):
    """An unsigned (anonymous) agent may build a checkout but not place the order: its complete hands
    the buyer over to continue_url; the buyer confirms there, and the agent's next complete places
    exactly that order."""
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'optional' WHERE id = $1", company.id)
    r = await shop.post(url("/checkout-sessions"), json=payload("pot_ceramic", fulfillment=SHIP_US),
                        headers=headers(key=new_key()))  # fmt: skip
    co = await r.json()
    assert r.status == 201 and r.headers.get("UCP-Access-Level") == "anonymous", co
    r = await shop.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    body = await r.json()
    assert body["status"] == "requires_escalation" and "order" not in body, body
    assert any(m["code"] == "buyer_handoff_required" for m in body["messages"])
    path = urlsplit(body["continue_url"]).path
    browser = browser_for(shop)
    await browser.get(path)
    await browser.screenshot("buyer_handoff_page")
    assert "not identified to the shop" in await browser.text()
    await browser.click("#agree")
    await browser.submit("#confirm-button", path + "?confirmed=1")
    r = await shop.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    done = await r.json()
    assert done["status"] == "completed" and done["order"]["id"].startswith("ord_"), done
    await browser.get(path)
    assert "This checkout is complete." in await browser.text() and done["order"]["label"] in await browser.text()


VISA_OK, VISA_DECLINED = "4242 4242 4206 1234", "4000000000020000"  # the demo instruments' last digits


async def _handed_off(shop, database, company) -> tuple[dict, str]:
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'optional' WHERE id = $1", company.id)
    r = await shop.post(url("/checkout-sessions"), json=payload("pot_ceramic", fulfillment=SHIP_US),
                        headers=headers(key=new_key()))  # fmt: skip
    co = await r.json()
    assert r.headers.get("UCP-Access-Level") == "anonymous", co
    r = await shop.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    body = await r.json()
    assert any(m["code"] == "buyer_handoff_required" for m in body["messages"]), body
    return body, urlsplit(body["continue_url"]).path


async def test_the_buyer_pays_on_the_page_and_the_agent_reads_the_order(shop, browser_for, database, company):
    """A checkout an anonymous agent built is completed by the buyer on the page (the demo handler's
    card form); the agent then reads it completed, with its order; the card number is never shown."""
    co, path = await _handed_off(shop, database, company)
    browser = browser_for(shop)
    await browser.get(path)
    await browser.screenshot("buyer_pay_page")
    main = await browser.text()
    assert "Or pay here yourself" in main and "demo payment handler" in main
    await browser.type("#card_number", VISA_OK)
    await browser.type("#card_expiry", "12/39")
    await browser.click("#pay_agree")
    await browser.submit("#pay-button", path + "?paid=1")
    await browser.screenshot("buyer_pay_done")
    main = await browser.text()
    assert "your order is placed" in main and "This checkout is complete." in main
    html = await browser.source()
    assert "4242" not in html and "1234" not in html and "success_token" not in html  # no card data shown back

    r = await shop.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    seen = await r.json()
    assert seen["status"] == "completed" and seen["order"]["id"].startswith("ord_"), seen
    assert seen["order"]["label"] in main
    r = await shop.get(urlsplit(seen["order"]["permalink_url"]).path)
    assert r.status == 200 and seen["order"]["label"] in await r.text()
    _page_headers(r)
    async with tenant_tx(database.pool, company.id) as conn:
        orders = await conn.fetchval("SELECT count(*) FROM orders WHERE checkout_id = $1", co["id"])
        audit = await conn.fetch("SELECT decision FROM verb_audit_log WHERE verb = 'checkout.complete'")
        ref = await conn.fetchval("SELECT token_ref FROM payments WHERE checkout_id = $1", co["id"])
    assert orders == 1 and ref == "demo:instr_1" and [a["decision"] for a in audit][-1] == "allowed"
    # the agent's own complete now finds the checkout completed: no second order
    r = await shop.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    assert r.status == 409


async def test_the_page_refuses_a_bad_card_a_decline_and_a_replay(shop, browser_for, database, company):
    co, path = await _handed_off(shop, database, company)
    browser = browser_for(shop)
    await browser.get(path)
    form = await _form(browser, path)
    token = await browser.value("form[action$='/pay'] input[name=confirmation_token]")
    pay_form = {"csrf_token": form["csrf_token"], "card_expiry": "12/39", "agree": "yes", "confirmation_token": token}

    def post(**f):
        return shop.post(path + "/pay", data={**pay_form, **f}, cookies={"ucpgw_csrf": form["cookie"]},
                         allow_redirects=False)  # fmt: skip

    r = await post(card_number="4242424242424241")  # not Luhn-valid: refused, the form still good
    assert r.status == 400 and "not accepted" in await r.text()
    r = await post(card_number=VISA_OK, card_expiry="01/20")
    assert r.status == 400
    r = await post(card_number=VISA_OK, csrf_token="x" * 43)
    assert r.status == 403
    r = await post(card_number=VISA_DECLINED)
    assert r.status == 402 and "declined" in await r.text()
    r = await post(card_number=VISA_OK)  # the token was spent by the declined attempt
    assert r.status == 409 and "already sent" in await r.text()
    r = await shop.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    assert (await r.json())["status"] != "completed"
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM orders WHERE checkout_id = $1", co["id"]) == 0

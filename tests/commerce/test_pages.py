"""The buyer-facing pages behind continue_url, links[] and permalink_url: real app, real database."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr

from ucp_gateway.commerce.pages import format_money, render_home_page, render_policy_page
from ucp_gateway.db import tenant_tx

from .conftest import SHIP_US, headers, make_app, new_key, pay, payload, started, url

BUYER = {"email": "jane.buyer@example.com"}


@pytest.fixture
async def shop(aiohttp_client, database, db_settings, company, clock, platform):
    app = make_app(database, db_settings, clock, simulation_secret=SecretStr("s3cret-sim"))
    return await started(aiohttp_client, app, database, company)


async def _checkout(shop, **extra) -> dict:
    r = await shop.post(url("/checkout-sessions"), json=payload(**extra), headers=headers(key=new_key()))
    assert r.status == 201
    return await r.json()


def _private(r) -> None:
    assert r.content_type == "text/html" and r.charset == "utf-8"
    assert r.headers["Cache-Control"] == "no-store"
    assert r.headers["Referrer-Policy"] == "no-referrer"  # the id in the URL is the capability
    assert "default-src 'none'" in r.headers["Content-Security-Policy"]


async def test_continue_url_serves_the_checkout_without_personal_data(shop):
    co = await _checkout(shop, fulfillment=SHIP_US, buyer=BUYER)
    r = await shop.get(urlsplit(co["continue_url"]).path)
    page = await r.text()
    assert r.status == 200, page
    _private(r)
    assert co["line_items"][0]["item"]["title"] in page
    assert format_money(co["totals"][-1]["amount"], "USD") in page
    assert "ready to pay" in page
    # no buyer, destination or payment details on a capability URL
    assert BUYER["email"] not in page and "62704" not in page


async def test_completed_checkout_links_its_order_and_the_permalink_shows_shipping(shop):
    co = await _checkout(shop, fulfillment=SHIP_US, buyer=BUYER)
    r = await shop.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    done = await r.json()
    assert done["status"] == "completed", done
    page = await (await shop.get(f"/checkout-sessions/{co['id']}")).text()
    oid = done["order"]["id"]
    assert "This checkout is complete." in page and f'href="/orders/{oid}"' in page
    assert "Open until" not in page

    r = await shop.get(urlsplit(done["order"]["permalink_url"]).path)
    page = await r.text()
    assert r.status == 200, page
    _private(r)
    assert done["order"]["label"] in page and "Not shipped yet." in page
    assert "success_token" not in page and "62704" not in page and BUYER["email"] not in page

    r = await shop.post(f"/testing/simulate-shipping/{oid}", headers={"Simulation-Secret": "s3cret-sim"})
    assert r.status == 200
    page = await (await shop.get(f"/orders/{oid}")).text()
    assert "shipped at " in page and "fulfilled" in page and "Not shipped yet." not in page


async def test_expired_session_shows_as_canceled_and_nothing_is_written(shop, database, company, clock):
    co = await _checkout(shop)
    clock.advance(timedelta(hours=7))
    page = await (await shop.get(f"/checkout-sessions/{co['id']}")).text()
    assert "This checkout was canceled." in page
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT status FROM checkout_sessions WHERE id = $1", co["id"]) == "incomplete"


async def test_unknown_ids_and_hosts_are_html_404s(shop):
    for path in ("/checkout-sessions/chk_nope", "/orders/ord_nope"):
        r = await shop.get(path)
        assert r.status == 404 and r.content_type == "text/html", path
        assert "does not exist" in await r.text()
    r = await shop.get("/terms", headers={"Host": "no-such-shop.example"})
    assert r.status == 404 and "No shop is served on this host." in await r.text()


async def test_home_and_policies(shop, database, company):
    r = await shop.get("/")
    page = await r.text()
    assert r.status == 200
    _private(r)  # every page is no-store, the shop's public ones too
    assert "USD 15.00" in page  # the demo's ceramic pot, 1500 minor units
    r = await shop.get("/terms")
    assert r.status == 200 and "This is a demonstration shop run by ucp-gateway." in await r.text()  # demo seed
    r = await shop.head("/privacy")
    assert r.status == 200 and r.content_type == "text/html"


async def test_policy_text_from_company_settings_is_escaped(aiohttp_client, database, db_settings, company, platform):
    pages = {"commerce": {"pages": {"privacy": "We keep <nothing>.\n\nAsk us: privacy@example.com"}}}
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET settings = settings || $1::jsonb", pages)
    shop = await started(aiohttp_client, make_app(database, db_settings), database, company)
    r = await shop.get("/privacy")
    assert r.status == 200
    _private(r)
    text = await r.text()
    assert "<p>We keep &lt;nothing&gt;.</p>\n<p>Ask us: privacy@example.com</p>" in text
    assert "has not published" in await (await shop.get("/terms")).text()


def test_renderers_escape_and_format_minor_units():
    page = render_home_page('Flowers "&" <Co>', [{"title": "<script>x</script>", "price": 1850, "currency": "USD"}])
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "Flowers &#34;&amp;&#34; &lt;Co&gt;" in page  # markupsafe spells a quote &#34;
    assert format_money(1850, "USD") == "USD 18.50"
    assert format_money(-150, "EUR") == "-EUR 1.50"
    assert format_money(5, "USD") == "USD 0.05"
    assert format_money(500, "JPY") == "JPY 500"
    assert format_money(1234, "KWD") == "KWD 1.234"
    assert "<p>a</p>\n<p>b</p>" in render_policy_page("S", "terms", "a\n\n\n\nb")
    assert "S has not published its terms of service here yet." in render_policy_page("S", "terms", None)


async def test_pages_need_no_signature_where_agent_calls_do(aiohttp_client, database, db_settings, company, platform):
    """Regression (newcomer): under the demo's default policy (signatures required) every page was
    a 401 JSON answer, so continue_url, permalink_url and links[] led people nowhere."""
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'required' WHERE id = $1", company.id)
    shop = await started(aiohttp_client, make_app(database, db_settings), database, company)
    for path in ("/", "/terms", "/privacy"):
        r = await shop.get(path)
        assert r.status == 200 and r.content_type == "text/html", path
    for path in ("/checkout-sessions/chk_nope", "/orders/ord_nope"):
        r = await shop.get(path)
        assert r.status == 404 and r.content_type == "text/html", path  # the page's own answer, not a 401
    r = await shop.post(url("/checkout-sessions"), json=payload(), headers=headers(key=new_key()))
    assert r.status == 401 and (await r.json())["code"] == "signature_missing"  # agents still sign
    r = await shop.get(url("/checkout-sessions/chk_nope"), headers=headers())
    assert r.status == 401


@pytest.mark.parametrize("commerce", [{"pages": ["a"]}, {"pages": "text"}, "x", {"pages": {"terms": 7}}])
async def test_malformed_page_settings_are_no_text_not_a_500(
    aiohttp_client, database, db_settings, company, platform, commerce
):
    """Regression (newcomer): settings.commerce.pages that is not an object was a 500."""
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET settings = settings || $1::jsonb", {"commerce": commerce})
    shop = await started(aiohttp_client, make_app(database, db_settings), database, company)
    r = await shop.get("/terms")
    assert r.status == 200 and "has not published its terms of service here yet" in await r.text()

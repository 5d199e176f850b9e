"""A company's ``settings.commerce`` and ``settings.sign_responses`` of the wrong type, on the real
app and database: the commerce API fails closed as ``company_misconfigured`` (nothing written), page
texts are read as absent, a malformed ``sign_responses`` signs."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from ucp_gateway.commerce.demo import DEMO_PAGES
from ucp_gateway.db import tenant_tx
from ucp_gateway.demo.seed import seed_demo

from .conftest import SHIP_US, agent, headers, make_app, new_key, pay, payload, started, url

TERMS = "Our own terms."
DISCOUNT = {"id": "spring", "title": "Spring", "type": "percentage", "value": 10}


async def _set(database, company, **settings) -> None:
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET settings = settings || $1::jsonb", settings)


async def _written(database, company) -> tuple:
    async with tenant_tx(database.pool, company.id) as conn:
        return tuple(
            [
                await conn.fetchval(f"SELECT count(*) FROM {t}")
                for t in ("checkout_sessions", "commerce_idempotency", "verb_audit_log", "verb_idempotency")
            ]
        )


@pytest.mark.parametrize(
    ("commerce", "path"),
    [
        ("x", "commerce"),
        ([{"currency": "EUR"}], "commerce"),
        ({"currency": 840}, "commerce.currency"),
        ({"currency": "usd"}, "commerce.currency"),
        ({"buyer_max_order_amount": "5000"}, "commerce.buyer_max_order_amount"),
        ({"buyer_max_order_amount": True}, "commerce.buyer_max_order_amount"),
        ({"buyer_max_order_amount": -1}, "commerce.buyer_max_order_amount"),
        ({"automatic_discounts": DISCOUNT}, "commerce.automatic_discounts"),
        ({"automatic_discounts": ["spring"]}, "commerce.automatic_discounts[0]"),
        ({"automatic_discounts": [{**DISCOUNT, "value": "10"}]}, "commerce.automatic_discounts[0].value"),
        ({"automatic_discounts": [{**DISCOUNT, "value": 150}]}, "commerce.automatic_discounts[0].value"),
        ({"automatic_discounts": [{**DISCOUNT, "type": "percent"}]}, "commerce.automatic_discounts[0].type"),
        ({"automatic_discounts": [{**DISCOUNT, "min_subtotl": 5000}]}, "commerce.automatic_discounts[0].min_subtotl"),
        ({"automatic_discounts": [{"id": "spring"}]}, "commerce.automatic_discounts[0].title"),
        ({"pickup_locations": "Main St"}, "commerce.pickup_locations"),
        ({"pickup_locations": [{"name": "Main St"}]}, "commerce.pickup_locations[0].id"),
        ({"pickup_locations": [{"id": "p1", "name": 7}]}, "commerce.pickup_locations[0].name"),
        (
            {"pickup_locations": [{"id": "p1", "name": "Main", "address": "1 Main St"}]},
            "commerce.pickup_locations[0].address",
        ),
    ],
)
async def test_malformed_commerce_settings_refuse_the_commerce_api_and_write_nothing(
    aiohttp_client, database, db_settings, company, platform, commerce, path
):
    if isinstance(commerce, dict):  # the page texts beside them are read on their own
        commerce = {**commerce, "pages": {"terms": TERMS}}
    await _set(database, company, commerce=commerce)
    shop = await started(aiohttp_client, make_app(database, db_settings), database, company)
    before = await _written(database, company)
    with capture_logs() as logs:
        for body in (payload(), payload(fulfillment=SHIP_US, **pay())):
            r = await shop.post(url("/checkout-sessions"), json=body, headers=headers(key=new_key()))
            assert r.status == 500 and r.content_type == "application/json", await r.text()
            got = await r.json()
            assert got["code"] == "company_misconfigured", got
            assert f"its settings.{path} " in got["content"] and "'flower-shop'" in got["content"], got
        r = await shop.get(url("/checkout-sessions/chk_nope"), headers=headers())
        assert r.status == 500 and (await r.json())["code"] == "company_misconfigured"
        # the UCP MCP binding answers the same fault as a JSON-RPC error that names it
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "create_checkout",
                "arguments": {"meta": {"ucp-agent": {"profile": agent()}}, "checkout": payload()},
            },
        }
        r = await shop.post("/ucp/mcp", json=call, headers={"Content-Type": "application/json"})
        rpc = await r.json()
        assert r.status == 500 and rpc["error"]["code"] == -32603, rpc
        assert rpc["error"]["data"]["code"] == "company_misconfigured" and path in rpc["error"]["data"]["content"]
    assert await _written(database, company) == before  # no checkout, idempotency record or audit row
    bad = [e for e in logs if e["event"] == "company_settings_invalid"]
    assert [(e["path"], e["effect"]) for e in bad] == [(path, "refused")], bad  # once for the loaded row
    # the shop's other requests go on; a page text beside the fault is still read
    assert (await shop.get("/.well-known/ucp")).status == 200
    page = await (await shop.get("/terms")).text()
    assert (TERMS in page) if isinstance(commerce, dict) else ("has not published its terms" in page)


async def test_well_formed_commerce_settings_are_read(aiohttp_client, database, db_settings, company, platform):
    commerce = {
        "currency": "USD",
        "buyer_max_order_amount": None,  # no limit
        "automatic_discounts": [{**DISCOUNT, "min_subtotal": 0}],
        "pickup_locations": [{"id": "p1", "name": "Main St", "address": None}],
        "pages": None,
    }
    await _set(database, company, commerce=commerce)
    shop = await started(aiohttp_client, make_app(database, db_settings), database, company)
    r = await shop.post(url("/checkout-sessions"), json=payload(), headers=headers(key=new_key()))
    body = await r.json()
    assert r.status == 201 and body["currency"] == "USD", body
    assert [d["title"] for d in body["discounts"]["applied"]] == ["Spring"]


@pytest.mark.parametrize("pages", [["a"], "text", {"terms": 7}, {"terms": ["a"]}])
async def test_malformed_page_texts_are_absent_and_logged_once(
    aiohttp_client, database, db_settings, company, platform, pages
):
    await _set(database, company, commerce={"pages": pages})
    shop = await started(aiohttp_client, make_app(database, db_settings), database, company)
    with capture_logs() as logs:
        for _ in range(3):
            r = await shop.get("/terms")
            assert r.status == 200 and "has not published its terms of service here yet" in await r.text()
        # cosmetic only: the commerce API goes on
        r = await shop.post(url("/checkout-sessions"), json=payload(), headers=headers(key=new_key()))
        assert r.status == 201, await r.text()
    bad = [e for e in logs if e["event"] == "company_settings_invalid"]
    path = "commerce.pages" if not isinstance(pages, dict) else "commerce.pages.terms"
    assert [(e["path"], e["read"], e["effect"]) for e in bad] == [(path, "commerce.pages.terms", "absent")]


@pytest.mark.parametrize("value", [0, "", [], {}, "false", "yes"])
async def test_malformed_sign_responses_signs_every_response(
    aiohttp_client, database, db_settings, company, platform, value
):
    """Fails closed as ``true``: a response is signed when the setting cannot be read."""
    shop = await started(aiohttp_client, make_app(database, db_settings), database, company)
    r = await shop.get(url("/checkout-sessions/chk_nope"), headers=headers())
    assert r.status == 200 and "Signature" not in r.headers  # not asked for
    await _set(database, company, sign_responses=value)
    shop = await started(aiohttp_client, make_app(database, db_settings), database, company)  # no cached row
    with capture_logs() as logs:
        r = await shop.get(url("/checkout-sessions/chk_nope"), headers=headers())
    assert r.status == 200 and r.headers["Signature-Input"].startswith("sig1=")
    assert r.headers["Content-Digest"] and r.headers["Signature"]
    bad = [e for e in logs if e["event"] == "company_settings_invalid"]
    assert [(e["path"], e["effect"]) for e in bad] == [("sign_responses", "read as True")]


@pytest.mark.parametrize("commerce", ["x", [1], 7])
async def test_demo_seed_leaves_a_malformed_commerce_section_as_it_is(database, db_settings, company, commerce):
    """Regression: the demo's page seeding merged into a commerce section that was no object, which
    jsonb turned into an array (``["x", {"pages": ...}]``). Now it writes nothing there."""
    await _set(database, company, commerce=commerce)
    await seed_demo(database, db_settings)
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT settings->'commerce' FROM companies") == commerce
    await _set(database, company, commerce=None)  # null is absent: the demo pages are written
    await seed_demo(database, db_settings)
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT settings->'commerce' FROM companies") == {"pages": DEMO_PAGES}

"""End to end with real signatures: a buyer agent with its own key and platform profile on 127.0.0.1
signs every request (RFC 9421), discovers the flower shop, checks out with 10OFF, receives the signed
order webhook, verifies it and the complete response against the shop's /.well-known/ucp, and gets a
byte-identical answer for a replayed complete."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

from ucp_gateway.db import tenant_tx

from .conftest import new_key
from .signedflow import buyer, deliver_webhooks, shop, signature_kid, signed, verify_webhook  # noqa: F401 - fixtures
from .sigutil import RespMsg, verify_with_jwk


async def test_signed_buyer_agent_end_to_end(shop, buyer, database, db_settings):  # noqa: F811 - the imported fixture
    # discover
    r = await shop.get("/.well-known/ucp")
    profile = await r.json()
    shop_keys = {k["kid"]: k for k in profile.get("signing_keys", [])}
    assert shop_keys, profile
    endpoint = next(s["endpoint"] for s in profile["ucp"]["services"]["dev.ucp.shopping"] if s["transport"] == "rest")
    base = urlsplit(endpoint).path

    # unsigned requests are refused by the shop's signature policy
    r = await shop.post(
        base + "/checkout-sessions",
        json={"line_items": []},
        headers={"UCP-Agent": f'profile="{buyer.base}/profile/a.json"'},
    )
    assert r.status == 401

    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 2}]}
    r = await signed(shop, buyer, "POST", base + "/checkout-sessions", create, new_key())
    co = await r.json()
    assert r.status == 201, co
    assert set(co["ucp"]["capabilities"]) >= {"dev.ucp.shopping.checkout", "dev.ucp.shopping.fulfillment"}

    # pick shipping and apply 10OFF
    upd = {
        **create,
        "fulfillment": {
            "methods": [
                {
                    "type": "shipping",
                    "destinations": [
                        {
                            "id": "home",
                            "street_address": "1 Elm St",
                            "address_locality": "Springfield",
                            "postal_code": "62704",
                            "address_country": "US",
                        }
                    ],
                    "selected_destination_id": "home",
                }
            ]
        },
    }
    r = await signed(shop, buyer, "PUT", base + f"/checkout-sessions/{co['id']}", upd, new_key())
    co = await r.json()
    options = co["fulfillment"]["methods"][0]["groups"][0]["options"]
    upd["fulfillment"]["methods"][0]["groups"] = [
        {"id": co["fulfillment"]["methods"][0]["groups"][0]["id"], "selected_option_id": options[0]["id"]}
    ]
    upd["discounts"] = {"codes": ["10OFF"]}
    r = await signed(shop, buyer, "PUT", base + f"/checkout-sessions/{co['id']}", upd, new_key())
    co = await r.json()
    assert co["status"] == "ready_for_complete", co
    assert {t["type"]: t["amount"] for t in co["totals"]} == {
        "subtotal": 3000,
        "discount": -300,
        "fulfillment": 500,
        "total": 3200,
    }

    # complete (signed response, verified against the shop's published key)
    pay = {
        "payment": {
            "instruments": [
                {
                    "id": "instr_1",
                    "handler_id": "mock_payment_handler",
                    "type": "card",
                    "credential": {"type": "token", "token": "success_token"},
                }
            ]
        }
    }
    ckey = new_key()
    r1 = await signed(shop, buyer, "POST", base + f"/checkout-sessions/{co['id']}/complete", pay, ckey)
    b1 = await r1.read()
    assert r1.status == 200, b1
    done = json.loads(b1)
    assert done["status"] == "completed" and b"success_token" not in b1
    kid = signature_kid(r1.headers)
    bound = ('"@method";req', '"@authority";req', '"@path";req', '"ucp-agent";req', '"idempotency-key";req')
    verify_with_jwk(
        RespMsg(r1.status, dict(r1.headers), b1, r1.sent), shop_keys[kid], ("@status", "content-digest", *bound)
    )

    # the order webhook, signed with the company key, verified against /.well-known/ucp
    assert await deliver_webhooks(database, db_settings) == 1
    ((h, body),) = buyer.received
    order = json.loads(body)
    assert order["id"] == done["order"]["id"] and order["totals"][-1]["amount"] == 3200
    verify_webhook(buyer, h, body, shop_keys)
    assert h["UCP-Agent"].startswith('profile="') and h["Webhook-Id"] and h["Webhook-Timestamp"].isdigit()

    # a replayed complete (freshly signed, same key and body) is byte-identical
    r2 = await signed(shop, buyer, "POST", base + f"/checkout-sessions/{co['id']}/complete", pay, ckey)
    assert (r2.status, await r2.read()) == (r1.status, b1)


async def test_signed_body_must_be_application_json(shop, buyer):  # noqa: F811 - the imported fixture
    """Regression: a signed create with ``Content-Type: text/plain`` and a JSON body answered 201."""
    base = "/ucp/v1/checkout-sessions"
    raw = json.dumps({"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}).encode()

    async def post(path: str, ctype: str | None, method: str = "POST"):
        h = {"UCP-Agent": f'profile="{buyer.base}/profile/a.json"', "Idempotency-Key": new_key()}
        if ctype is not None:
            h["Content-Type"] = ctype
        h = buyer.key.sign(method, str(shop.make_url(path)), h, raw)
        return await shop.request(method, path, data=raw, headers=h, skip_auto_headers=["Content-Type"])

    for ctype in ("text/plain", "application/x-www-form-urlencoded", "application/jsonx"):
        r = await post(base, ctype)
        body = await r.json()
        assert r.status == 415 and body["code"] == "unsupported_media_type" and body["content"], (ctype, body)
    r = await post(base, "Application/JSON; charset=utf-8")
    co = await r.json()
    assert r.status == 201, co
    r = await post(f"{base}/{co['id']}", "text/plain", method="PUT")
    assert r.status == 415 and (await r.json())["code"] == "unsupported_media_type"


async def test_an_unsigned_caller_never_acts_as_a_verified_platform(shop, buyer, database, company):  # noqa: F811 - the imported fixture
    """Regression (security review): under signature policy ``optional`` an unsigned request naming
    a platform's profile in UCP-Agent was that platform: it read its checkouts and reached its
    idempotency records. The claimed profile is now a separate identity (``unverified:<url>``)."""
    base = "/ucp/v1/checkout-sessions"
    r = await signed(shop, buyer, "POST", base, {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}, "k1")
    co = await r.json()
    assert r.status == 201, co
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'optional' WHERE id = $1", company.id)
    claim = {"UCP-Agent": f'profile="{buyer.base}/profile/a.json"'}
    # the policy change reaches the gateway within two host_cache_ttl (an entry past its ttl is
    # answered once more while one background read revalidates it)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        r = await shop.get(f"{base}/{co['id']}", headers=claim)
        body = await r.json()
        if r.status != 401 or loop.time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert r.status == 200 and body["messages"][0]["code"] == "not_found", body  # not the platform's checkout
    # the platform's own key, with its own bytes: a fresh request of the unsigned identity, not a replay
    raw = json.dumps({"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}).encode()
    h = {**claim, "Content-Type": "application/json", "Idempotency-Key": "k1"}
    r = await shop.post(base, data=raw, headers=h)
    other = await r.json()
    assert r.status == 201 and "Idempotent-Replayed" not in r.headers and other["id"] != co["id"], other
    # the signed platform still sees its own checkout, and not the unsigned caller's
    r = await signed(shop, buyer, "GET", f"{base}/{co['id']}")
    assert r.status == 200 and (await r.json())["id"] == co["id"]
    r = await signed(shop, buyer, "GET", f"{base}/{other['id']}")
    assert (await r.json())["messages"][0]["code"] == "not_found"


async def test_a_missing_required_header_is_named(shop, buyer):  # noqa: F811 - the imported fixture
    """Regression (newcomer): a signed POST without Idempotency-Key (or a body without Content-Type)
    got "signature does not cover required components: idempotency-key", which did not say the
    header itself was missing."""
    base = "/ucp/v1/checkout-sessions"
    raw = json.dumps({"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}).encode()
    for drop, name in (("Idempotency-Key", "idempotency-key"), ("Content-Type", "content-type")):
        h = {"UCP-Agent": f'profile="{buyer.base}/profile/a.json"', "Idempotency-Key": new_key()}
        h["Content-Type"] = "application/json"
        del h[drop]
        signed = buyer.key.sign("POST", str(shop.make_url(base)), h, raw)
        r = await shop.post(base, data=raw, headers=signed, skip_auto_headers=["Content-Type"])
        body = await r.json()
        assert r.status == 401 and body["code"] == "signature_invalid", body
        assert body["content"] == (
            f"signature does not cover required components: {name}"
            f" (the request has no {drop} header; UCP requires it here, covered by the signature)"
        ), body

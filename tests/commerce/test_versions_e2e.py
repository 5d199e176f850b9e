"""One gateway, every served version.

A 2026-08-25 (Ed25519 key, thumbprint kid) and a 2026-04-08 (P-256) buyer platform each complete a
signed checkout (create, update, complete, order webhook) in one run, each seeing only its own
version's shapes (validated against that version's official models, tests/ucp_models.py); a
2026-01-23 platform is refused with the versions served; a checkout created under 2026-04-08 and
completed under 2026-08-25 is one checkout and one order."""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import urlsplit

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.versions import SERVED, VERSIONS

from ..ucp_models import validate
from .conftest import SHIP_US, Platform, headers, new_key, pay, payload
from .signedflow import deliver_webhooks, shop, signature_kid, signed, verify_webhook  # noqa: F401 - fixture
from .sigutil import BuyerKey, RespMsg, verify_with_jwk

NEW, OLD = "2026-08-25", "2026-04-08"
PURPOSE = "dev.ucp.consent.marketing"


@pytest.fixture
async def platforms():
    out = {}
    for version in (NEW, OLD, "2026-01-23"):
        key = BuyerKey(curve="Ed25519") if version == NEW else BuyerKey()  # 2026-08-25 signs with EdDSA
        p = await Platform(signing_keys=[dict(key.jwk)], version=version).start()
        p.key = key
        out[version] = p
    yield out
    for p in out.values():
        await p.runner.cleanup()


def _own_shapes(body: dict, version: str) -> None:
    """Everything version-specific in a checkout is the caller's version, nothing of the other."""
    assert body["ucp"]["version"] == version
    assert {e["version"] for es in body["ucp"]["capabilities"].values() for e in es} == {version}
    (handler,) = [e for es in body["ucp"]["payment_handlers"].values() for e in es]
    constraints = handler["available_instruments"][0]["constraints"]
    consent = (body.get("buyer") or {}).get("consent")
    if version == NEW:
        assert constraints == {"properties": {"brand": {"enum": ["visa", "mastercard"]}}}
        assert consent is not None and set(consent) == {
            "dev.ucp.consent.analytics",
            "dev.ucp.consent.preferences",
            PURPOSE,
            "dev.ucp.consent.sale_or_sharing",
        }
    else:
        assert constraints == {"brands": ["visa", "mastercard"]}
        assert consent is None or not any(k.startswith("dev.ucp.") for k in consent)
    assert validate("checkout", body) == version


async def _checkout(client, buyer, version: str, shop_keys: dict) -> tuple[dict, dict]:
    base = "/ucp/v1"
    r = await signed(client, buyer, "POST", base + "/checkout-sessions", payload("pot_ceramic", 2), new_key())
    co = await r.json()
    assert r.status == 201, co
    _own_shapes(co, version)
    consent = {PURPOSE: {"granted": True, "source": "platform"}} if version == NEW else {"marketing": True}
    upd = payload("pot_ceramic", 2, fulfillment=SHIP_US, discounts={"codes": ["10OFF"]})
    upd["buyer"] = {"email": f"buyer-{version}@example.com", "consent": consent}
    r = await signed(client, buyer, "PUT", base + f"/checkout-sessions/{co['id']}", upd, new_key())
    co = await r.json()
    assert r.status == 200 and co["status"] == "ready_for_complete", co
    _own_shapes(co, version)
    if version == NEW:
        assert co["buyer"]["consent"][PURPOSE]["granted"] is True
        assert co["buyer"]["consent"][PURPOSE]["source"] == "platform"
        assert co["buyer"]["consent"]["dev.ucp.consent.analytics"]["source"] == "business"
    else:
        assert co["buyer"]["consent"] == {"marketing": True}
    r = await signed(client, buyer, "POST", base + f"/checkout-sessions/{co['id']}/complete", pay(), new_key())
    raw = await r.read()
    done = json.loads(raw)
    assert r.status == 200 and done["status"] == "completed", done
    _own_shapes(done, version)
    kid = signature_kid(r.headers)
    verify_with_jwk(RespMsg(r.status, dict(r.headers), raw, r.sent), shop_keys[kid], ("@status", "content-digest"))
    return co, done


async def test_each_version_completes_a_signed_checkout_in_its_own_shapes(shop, platforms, database, db_settings):  # noqa: F811 - the imported fixture
    root = await (await shop.get("/.well-known/ucp")).json()
    assert root["ucp"]["version"] == NEW and set(root["ucp"]["supported_versions"]) == {OLD}
    orders = {}
    for version in (NEW, OLD):
        buyer = platforms[version]
        # a 2026-08-25 verifier reads keys[]; a 2026-04-08 one reads signing_keys at /.well-known/ucp
        member = "keys" if version == NEW else "signing_keys"
        shop_keys = {k["kid"]: k for k in root[member]}
        _, done = await _checkout(shop, buyer, version, shop_keys)
        orders[version] = (done["order"]["id"], shop_keys)

    # the order webhooks: each platform gets its order in its own version, signed by the shop
    assert await deliver_webhooks(database, db_settings) == 2
    for version, (order_id, shop_keys) in orders.items():
        buyer = platforms[version]
        ((h, body),) = buyer.received
        order = json.loads(body)
        assert order["id"] == order_id and order["ucp"]["version"] == version
        assert {e["version"] for es in order["ucp"]["capabilities"].values() for e in es} == {version}
        assert validate("order", order) == version
        verify_webhook(buyer, h, body, shop_keys)
        # the webhook names the root profile (2026-04-08 SIG: a business profile URL is /.well-known/ucp)
        assert urlsplit(h["UCP-Agent"].split('"')[1]).path == "/.well-known/ucp"

    # a 2026-01-23 platform: 422 version_unsupported naming what is served
    r = await signed(shop, platforms["2026-01-23"], "POST", "/ucp/v1/checkout-sessions", payload(), new_key())
    body = await r.json()
    assert r.status == 422 and body["code"] == "version_unsupported", body
    assert body["supported_versions"] == list(SERVED)
    assert all(v in body["content"] for v in SERVED)


async def test_created_under_2026_04_08_completed_under_2026_08_25_is_one_order(
    frozen_client, platform, clock, database, company
):
    client = frozen_client
    assert platform.version == OLD
    data = payload("pot_ceramic", 1, fulfillment=SHIP_US)
    data["buyer"] = {"email": "x@example.com", "consent": {"analytics": True}}
    r = await client.post("/ucp/v1/checkout-sessions", json=data, headers=headers(key=new_key()))
    co = await r.json()
    assert r.status == 201 and co["ucp"]["version"] == OLD and validate("checkout", co) == OLD, co

    platform.version = NEW  # the platform moves to 2026-08-25; its profile is refetched after its TTL
    clock.advance(timedelta(seconds=3600))
    r = await client.get(f"/ucp/v1/checkout-sessions/{co['id']}", headers=headers())
    read = await r.json()
    assert read["ucp"]["version"] == NEW and validate("checkout", read) == NEW, read
    assert read["buyer"]["consent"]["dev.ucp.consent.analytics"] == {
        "granted": True,
        "source": "platform",
        "description": read["buyer"]["consent"]["dev.ucp.consent.analytics"]["description"],
    }
    named = {path.split(".")[0] for path in VERSIONS[NEW].wire_fields["checkout"]}  # ucp, buyer, fulfillment
    assert {k: v for k, v in read.items() if k not in named} == {k: v for k, v in co.items() if k not in named}
    assert read["buyer"]["email"] == co["buyer"]["email"]  # one state: only the version's fields differ
    r = await client.post(f"/ucp/v1/checkout-sessions/{co['id']}/complete", json=pay(), headers=headers(key=new_key()))
    done = await r.json()
    assert r.status == 200 and done["status"] == "completed" and done["ucp"]["version"] == NEW, done
    async with tenant_tx(database.pool, company.id) as conn:
        orders = await conn.fetch("SELECT id FROM orders WHERE checkout_id = $1", co["id"])
        payload_raw = await conn.fetchval("SELECT payload FROM webhook_outbox WHERE order_id = $1", orders[0]["id"])
    assert [o["id"] for o in orders] == [done["order"]["id"]]
    assert json.loads(payload_raw)["ucp"]["version"] == NEW  # the webhook in the completing version
    # and read back under 2026-04-08 again: the same order, in that version's shape
    platform.version = OLD
    clock.advance(timedelta(seconds=3600))
    r = await client.get(f"/ucp/v1/orders/{done['order']['id']}", headers=headers())
    order = await r.json()
    assert order["ucp"]["version"] == OLD and validate("order", order) == OLD, order

"""A cart and the checkout made from it (UCP cart "Cart-to-Checkout Conversion", migration 0120):
the checkout's line-item changes are the cart's, its completion ends the cart, a canceled checkout
leaves the cart as it was; the link goes with its cart. Over REST on the real app and database."""

from __future__ import annotations

from ucp_gateway.db import tenant_tx

from .conftest import SHIP_US, agent, headers, make_app, new_key, pay, started, url


async def _cart(client, items, **extra) -> dict:
    r = await client.post(url("/carts"), json={"line_items": items, **extra}, headers=headers(key=new_key()))
    assert r.status == 201, await r.text()
    return await r.json()


async def _checkout_of(client, cart_id: str) -> dict:
    r = await client.post(url("/checkout-sessions"), json={"cart_id": cart_id, "fulfillment": SHIP_US},
                          headers=headers(key=new_key()))  # fmt: skip
    assert r.status in (200, 201), await r.text()
    return await r.json()


async def _get_cart(client, cart_id: str, who: str | None = None) -> dict:
    return await (await client.get(url(f"/carts/{cart_id}"), headers=headers(who))).json()


def _items(body: dict) -> list[tuple[str, int]]:
    return [(li["item"]["id"], li["quantity"]) for li in body["line_items"]]


async def _links(database, company) -> int:
    async with tenant_tx(database.pool, company.id) as conn:
        return await conn.fetchval("SELECT count(*) FROM cart_checkouts")


async def test_checkout_line_item_changes_are_written_back_to_its_cart(client, database, company):
    cart = await _cart(client, [{"item": {"id": "tulips_red"}, "quantity": 1}, {"item": {"id": "cactus_mini"},
                       "quantity": 2}], discounts={"codes": ["10off"]}, context={"address_country": "US"})  # fmt: skip
    other = await _cart(client, [{"item": {"id": "tulips_red"}, "quantity": 1}])
    co = await _checkout_of(client, cart["id"])
    # the platform changes a quantity, removes a line and adds one on the checkout
    changed = [{"item": {"id": "tulips_red"}, "quantity": 3}, {"item": {"id": "vase_glass_s"}, "quantity": 1}]
    r = await client.put(url(f"/checkout-sessions/{co['id']}"), json={"line_items": changed, "fulfillment": SHIP_US},
                         headers=headers(key=new_key()))  # fmt: skip
    assert r.status == 200, await r.text()
    now = await _get_cart(client, cart["id"])
    assert _items(now) == [("tulips_red", 3), ("vase_glass_s", 1)]
    # the cart keeps what is its own: its codes and context
    assert now["discounts"]["applied"][0]["code"] == "10OFF" and now["context"] == {"address_country": "US"}
    assert _items(await _get_cart(client, other["id"])) == [("tulips_red", 1)]  # another cart is untouched
    # converting again returns the same open checkout, whose items are the cart's now
    again = await _checkout_of(client, cart["id"])
    assert again["id"] == co["id"] and _items(again) == _items(now)


async def test_a_completed_checkout_ends_its_cart(client, database, company):
    cart = await _cart(client, [{"item": {"id": "tulips_red"}, "quantity": 1}])
    co = await _checkout_of(client, cart["id"])
    assert await _links(database, company) == 1
    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    assert (await r.json())["status"] == "completed"
    gone = await _get_cart(client, cart["id"])
    assert gone["ucp"]["status"] == "error" and gone["messages"][0]["code"] == "not_found"
    again = await _checkout_of(client, cart["id"])
    assert again["messages"][0]["code"] == "not_found" and "id" not in again
    assert await _links(database, company) == 0
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM carts") == 0


async def test_a_canceled_checkout_leaves_the_cart_and_a_new_one_can_be_made(client):
    cart = await _cart(client, [{"item": {"id": "cactus_mini"}, "quantity": 2}])
    co = await _checkout_of(client, cart["id"])
    r = await client.post(url(f"/checkout-sessions/{co['id']}/cancel"), json={}, headers=headers(key=new_key()))
    assert (await r.json())["status"] == "canceled"
    assert _items(await _get_cart(client, cart["id"])) == [("cactus_mini", 2)]
    fresh = await _checkout_of(client, cart["id"])
    assert fresh["id"] != co["id"] and _items(fresh) == [("cactus_mini", 2)]


async def test_a_checkout_without_a_cart_touches_no_cart(client):
    cart = await _cart(client, [{"item": {"id": "cactus_mini"}, "quantity": 2}])
    r = await client.post(url("/checkout-sessions"), json={"line_items": [{"item": {"id": "tulips_red"},
                          "quantity": 1}]}, headers=headers(key=new_key()))  # fmt: skip
    co = await r.json()
    r = await client.put(url(f"/checkout-sessions/{co['id']}"), json={"line_items": [{"item": {"id": "tulips_red"},
                         "quantity": 4}]}, headers=headers(key=new_key()))  # fmt: skip
    assert r.status == 200
    assert _items(await _get_cart(client, cart["id"])) == [("cactus_mini", 2)]


async def test_a_canceled_cart_takes_its_checkout_link_with_it(client, database, company):
    cart = await _cart(client, [{"item": {"id": "cactus_mini"}, "quantity": 1}])
    await _checkout_of(client, cart["id"])
    assert await _links(database, company) == 1
    r = await client.post(url(f"/carts/{cart['id']}/cancel"), json={}, headers=headers(key=new_key()))
    assert r.status == 200
    assert await _links(database, company) == 0


async def test_another_agents_checkout_of_the_cart_is_not_found(client):
    cart = await _cart(client, [{"item": {"id": "cactus_mini"}, "quantity": 1}])
    r = await client.post(url("/checkout-sessions"), json={"cart_id": cart["id"]},
                          headers=headers(agent("b"), key=new_key()))  # fmt: skip
    assert (await r.json())["messages"][0]["code"] == "not_found"


async def test_direct_path_answers_carts_with_the_cart_envelope(
    aiohttp_client, database, db_settings, company, platform
):
    """commerce_via_verbs=false: a cart's answer is shaped as a cart (it was shaped as an order)."""
    c = await started(aiohttp_client, make_app(database, db_settings, commerce_via_verbs=False), database, company)
    cart = await _cart(c, [{"item": {"id": "cactus_mini"}, "quantity": 1}])
    assert "dev.ucp.shopping.cart" in cart["ucp"]["capabilities"], cart["ucp"]
    assert "dev.ucp.shopping.order" not in cart["ucp"]["capabilities"]


async def test_a_2026_08_25_cart_carries_the_platforms_consent_into_its_checkout(client, platform):
    """A 2026-08-25 cart body's consent purposes are read as the neutral decisions (they were kept
    as unknown keys and lost on the way to the checkout); the cart answer validates against the
    2026-08-25 models (ucp-sdk 0.5.0) with the extensions served on carts."""
    from ucp_sdk.models.schemas.shopping import buyer_consent, cart, discount

    platform.version = "2026-08-25"
    consent = {"dev.ucp.consent.marketing": {"granted": True, "source": "platform"}}
    body = await _cart(client, [{"item": {"id": "tulips_red"}, "quantity": 1}], discounts={"codes": ["10off"]},
                       buyer={"email": "ann@example.com", "consent": consent})  # fmt: skip
    assert body["ucp"]["version"] == "2026-08-25"
    for model in (cart.Cart, discount.Cart, buyer_consent.Cart):
        model.model_validate(body)
    co = await _checkout_of(client, body["id"])
    assert co["ucp"]["version"] == "2026-08-25" and co["buyer"]["email"] == "ann@example.com"
    assert co["buyer"]["consent"]["dev.ucp.consent.marketing"] == {
        "granted": True, "source": "platform", "description": "Send promotional offers and news."}  # fmt: skip
    assert co["buyer"]["consent"]["dev.ucp.consent.analytics"]["source"] == "business"
    bad = {"line_items": [{"item": {"id": "tulips_red"}, "quantity": 1}],
           "buyer": {"consent": {"dev.ucp.consent.marketing": True}}}  # fmt: skip
    r = await client.post(url("/carts"), json=bad, headers=headers(key=new_key()))
    assert r.status == 400 and "$.buyer.consent" in (await r.json())["content"]

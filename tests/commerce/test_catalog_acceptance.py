"""Acceptance: a buyer agent that knows only the shop's origin finds "red roses", looks the product
up, builds a cart with two variants, turns it into a checkout and completes it, over REST and over
the UCP MCP binding; bad input answers spec-shaped errors, never a 500."""

from __future__ import annotations

import pytest
from ucp_sdk.models.schemas.shopping.cart import Cart
from ucp_sdk.models.schemas.shopping.catalog_lookup import GetProductResponse, LookupResponse
from ucp_sdk.models.schemas.shopping.catalog_search import SearchResponse

from ..ucp_models import validate
from .conftest import SHIP_US, agent, headers, new_key, pay


class Rest:
    """The REST binding, found from /.well-known/ucp."""

    def __init__(self, client, endpoint: str):
        self.client, self.prefix = client, endpoint.split("://", 1)[1].split("/", 1)[1]

    async def call(self, op: str, body=None, id_: str | None = None):
        method, path, key = {
            "search_catalog": ("POST", "/catalog/search", False),
            "lookup_catalog": ("POST", "/catalog/lookup", False),
            "get_product": ("POST", "/catalog/product", False),
            "create_cart": ("POST", "/carts", True),
            "get_cart": ("GET", f"/carts/{id_}", False),
            "update_cart": ("PUT", f"/carts/{id_}", True),
            "cancel_cart": ("POST", f"/carts/{id_}/cancel", True),
            "create_checkout": ("POST", "/checkout-sessions", True),
            "update_checkout": ("PUT", f"/checkout-sessions/{id_}", True),
            "complete_checkout": ("POST", f"/checkout-sessions/{id_}/complete", True),
        }[op]
        r = await self.client.request(method, f"/{self.prefix}{path}", json=body,
                                      headers=headers(key=new_key() if key else None))  # fmt: skip
        assert r.status < 500, await r.text()
        return r.status, await r.json()


class Mcp:
    """The MCP binding (JSON-RPC tools/call), found from /.well-known/ucp."""

    ARG = {"search_catalog": "catalog", "lookup_catalog": "catalog", "get_product": "catalog",
           "create_cart": "cart", "update_cart": "cart", "create_checkout": "checkout",
           "update_checkout": "checkout", "complete_checkout": "checkout"}  # fmt: skip

    def __init__(self, client, endpoint: str):
        self.client, self.path = client, "/" + endpoint.split("://", 1)[1].split("/", 1)[1]
        self.n = 0

    async def call(self, op: str, body=None, id_: str | None = None):
        self.n += 1
        args: dict = {"meta": {"ucp-agent": {"profile": agent()}, "idempotency-key": new_key()}}
        if id_ is not None:
            args["id"] = id_
        if body is not None:
            args[self.ARG[op]] = body
        msg = {"jsonrpc": "2.0", "id": self.n, "method": "tools/call", "params": {"name": op, "arguments": args}}
        r = await self.client.post(self.path, json=msg, headers={"Content-Type": "application/json"})
        assert r.status < 500, await r.text()
        out = await r.json()
        if "error" in out:
            return r.status, out["error"]
        return (201 if op.startswith("create_") else 200), out["result"]["structuredContent"]


async def _binding(client, transport: str):
    r = await client.get("/.well-known/ucp")
    profile = await r.json()
    caps = profile["ucp"]["capabilities"]
    assert {"dev.ucp.shopping.catalog.search", "dev.ucp.shopping.catalog.lookup", "dev.ucp.shopping.cart"} <= set(caps)
    services = profile["ucp"]["services"]["dev.ucp.shopping"]
    endpoint = next(s["endpoint"] for s in services if s["transport"] == transport)
    return (Rest if transport == "rest" else Mcp)(client, endpoint)


@pytest.mark.parametrize("version", ["2026-08-25", "2026-04-08"])
@pytest.mark.parametrize("transport", ["rest", "mcp"])
async def test_agent_searches_looks_up_carts_and_checks_out(client, platform, transport, version):
    platform.version = version  # the protocol version the agent's profile speaks
    shop = await _binding(client, transport)
    status, found = await shop.call("search_catalog", {"query": "red roses", "pagination": {"limit": 5}})
    assert status == 200, found
    assert found["ucp"]["version"] == version
    SearchResponse.model_validate(found)
    product = next(p for p in found["products"] if p["title"] == "Bouquet of Red Roses")
    status, looked = await shop.call("lookup_catalog", {"ids": [product["id"]]})
    LookupResponse.model_validate(looked)
    assert looked["products"][0]["variants"][0]["inputs"] == [{"id": product["id"], "match": "featured"}]
    status, detail = await shop.call("get_product", {"id": product["id"]})
    GetProductResponse.model_validate(detail)
    v12, v24 = detail["product"]["variants"][0]["id"], detail["product"]["variants"][1]["id"]
    items = [{"item": {"id": v12}, "quantity": 2}, {"item": {"id": v24}, "quantity": 1}]
    status, cart = await shop.call("create_cart", {"line_items": items, "discounts": {"codes": ["10off"]}})
    assert status == 201, cart
    Cart.model_validate(cart)
    totals = {t["type"]: t["amount"] for t in cart["totals"]}
    assert totals["subtotal"] == 2 * 3500 + 6500 and totals["discount"] == -1350
    status, again = await shop.call("get_cart", id_=cart["id"])
    assert again["totals"] == cart["totals"]
    # cart -> checkout: the cart's items and codes win over the request's own
    status, co = await shop.call("create_checkout", {"cart_id": cart["id"], "line_items": [
        {"item": {"id": "pot_ceramic"}, "quantity": 9}], "fulfillment": SHIP_US})  # fmt: skip
    assert status == 201, co
    assert validate("checkout", co) == version  # against the models of the version it answered in
    assert [(li["item"]["id"], li["quantity"]) for li in co["line_items"]] == [(v12, 2), (v24, 1)]
    assert co["discounts"]["applied"][0]["code"] == "10OFF"
    status, same = await shop.call("create_checkout", {"cart_id": cart["id"]})
    assert same["id"] == co["id"]  # the open checkout of the cart, not a second one
    status, done = await shop.call("complete_checkout", pay(), id_=co["id"])
    assert status == 200 and done["status"] == "completed", done
    assert {cart["ucp"]["version"], co["ucp"]["version"], done["ucp"]["version"]} == {version}
    # the completed checkout ended its cart
    status, ended = await shop.call("get_cart", id_=cart["id"])
    assert status == 200 and ended["messages"][0]["code"] == "not_found" and ended["ucp"]["status"] == "error"
    # cancel answers the state before deletion; afterwards not_found
    status, cart = await shop.call("create_cart", {"line_items": items})
    status, gone = await shop.call("cancel_cart", id_=cart["id"])
    assert status == 200 and gone["id"] == cart["id"] and gone["line_items"] == cart["line_items"]
    status, missing = await shop.call("get_cart", id_=cart["id"])
    assert missing["messages"][0]["code"] == "not_found" and missing["ucp"]["status"] == "error"


@pytest.mark.parametrize("transport", ["rest", "mcp"])
async def test_update_cart_is_full_replacement(client, transport):
    shop = await _binding(client, transport)
    _, cart = await shop.call("create_cart", {"line_items": [{"item": {"id": "tulips_red"}, "quantity": 1}],
                                              "discounts": {"codes": ["FIXED500"]}})  # fmt: skip
    _, upd = await shop.call("update_cart", {"line_items": [{"item": {"id": "vase_glass_s"}, "quantity": 3}]},
                             id_=cart["id"])  # fmt: skip
    assert [li["item"]["id"] for li in upd["line_items"]] == ["vase_glass_s"] and "discounts" not in upd
    assert {t["type"]: t["amount"] for t in upd["totals"]}["total"] == 3 * 1800


BAD = [
    ("search_catalog", {"query": "x" * 10_240}),
    ("search_catalog", {"query": "roses", "pagination": {"cursor": "not*a*cursor"}}),
    ("search_catalog", {"query": "roses", "filters": {"price": {"min": "cheap"}}}),
    ("search_catalog", {}),
    ("lookup_catalog", {"ids": "roses-red"}),
    ("lookup_catalog", {"ids": [f"id{i}" for i in range(60)]}),
    ("get_product", {"id": 7}),
    ("create_cart", {"line_items": [{"item": {"id": "bouquet_roses"}, "quantity": -1}]}),
    ("create_cart", {"line_items": [{"item": {"id": "bouquet_roses"}, "quantity": 10**12}]}),
    ("create_cart", {"line_items": "many"}),
]


@pytest.mark.parametrize("transport", ["rest", "mcp"])
async def test_bad_input_is_a_spec_shaped_error(client, transport):
    shop = await _binding(client, transport)
    codes = ("invalid_request", "invalid_cursor", "request_too_large")
    for op, body in BAD:
        status, err = await shop.call(op, body)
        if transport == "rest":
            assert status == 400 and err["code"] in codes, (op, err)
        else:  # JSON-RPC invalid params, the UCP code in data
            assert status == 400 and err["code"] == -32602 and err["data"]["code"] in codes, (op, err)
    # unknown ids are business outcomes: 200 with not_found
    status, got = await shop.call("get_product", {"id": "no-such-product"})
    assert status == 200 and got["messages"][0]["code"] == "not_found"
    status, looked = await shop.call("lookup_catalog", {"ids": ["no-such-product"]})
    assert status == 200 and looked["products"] == []
    status, cart = await shop.call("create_cart", {"line_items": [{"item": {"id": "no-such-item"}, "quantity": 1}]})
    assert status in (200, 201) and cart["ucp"]["status"] == "error" and "id" not in cart


async def test_cart_of_another_agent_is_not_found(client):
    r = await client.post("/ucp/v1/carts", json={"line_items": [{"item": {"id": "cactus_mini"}, "quantity": 1}]},
                          headers=headers(key=new_key()))  # fmt: skip
    cart = await r.json()
    r = await client.get(f"/ucp/v1/carts/{cart['id']}", headers=headers(agent("b")))
    assert (await r.json())["messages"][0]["code"] == "not_found"


async def test_another_companys_host_sees_none_of_this_catalogue(client, database):
    from ucp_gateway.db import tenant_tx
    from ucp_gateway.tenancy import create_company

    bare = await create_company(database.pool, slug="bare-shop", display_name="Bare", hostnames=("bare.example",))
    async with tenant_tx(database.pool, bare.id) as conn:  # unsigned test calls, as the demo fixture's
        await conn.execute("UPDATE companies SET signature_policy = 'off' WHERE id = $1", bare.id)
    h = {**headers(), "Host": "bare.example"}
    r = await client.post("/ucp/v1/catalog/search", json={"query": "red roses"}, headers=h)
    body = await r.json()
    assert r.status == 200 and body["products"] == [], body
    r = await client.post("/ucp/v1/catalog/lookup", json={"ids": ["roses-red", "bouquet_roses", "FS-BOUQUET-ROSES"]},
                          headers=h)  # fmt: skip
    assert (await r.json())["products"] == []
    r = await client.post("/ucp/v1/carts", json={"line_items": [{"item": {"id": "bouquet_roses"}, "quantity": 1}]},
                          headers={**h, "Idempotency-Key": new_key()})  # fmt: skip
    assert (await r.json())["ucp"]["status"] == "error"  # the item is not sold here
    assert "Bouquet of Red Roses" not in await (await client.get("/llms.txt", headers={"Host": "bare.example"})).text()


async def test_checkout_from_an_unknown_cart_is_not_found(client):
    r = await client.post("/ucp/v1/checkout-sessions", json={"cart_id": "cart_nope"}, headers=headers(key=new_key()))
    body = await r.json()
    assert r.status == 200 and body["messages"][0]["code"] == "not_found"

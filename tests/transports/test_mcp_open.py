"""MCP as real clients call it: the official SDK client, without credentials, against a shop whose
signature policy asks every call for a signature (the demo's default): discovery methods open,
tools/call refused with a challenge, tools listed by negotiated capability, schemas with field lists."""

from __future__ import annotations

import httpx2
import jsonschema
import pytest
from aiohttp import web
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.commerce.conftest import Platform
from ucp_gateway.app import create_app
from ucp_gateway.demo.seed import seed_demo


@pytest.fixture
async def shop(database, db_settings):
    platform = await Platform().start()
    company = (await seed_demo(database, db_settings)).company
    assert company.signature_policy == "required"
    s = db_settings.model_copy(update={"webhook_worker": False, "dev_profile_hosts": ["127.0.0.1"],
                                       "public_scheme": "http"})  # fmt: skip
    app = create_app(s, database=database)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", platform
    finally:
        await runner.cleanup()
        await platform.runner.cleanup()


async def _rpc(base, msg, headers=None):
    async with httpx2.AsyncClient(timeout=30) as http:
        resp = await http.post(base + "/ucp/mcp", json=msg, headers=headers or {})
    return resp, resp.json() if resp.content else None


async def test_sdk_client_without_credentials_lists_tools_with_schemas(shop):
    base, _ = shop
    async with httpx2.AsyncClient(timeout=30) as http:
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            init = await s.initialize()
            assert init.server_info.name == "ucp-gateway"
            await s.send_ping()
            tools = {t.name: t for t in (await s.list_tools()).tools}
    assert {"create_checkout", "get_checkout", "update_checkout", "complete_checkout", "cancel_checkout",
            "get_order"} <= set(tools)  # fmt: skip
    complete = tools["complete_checkout"].input_schema
    assert complete["required"] == ["meta", "id", "checkout"]
    assert "payment" in complete["properties"]["checkout"]["required"]
    create = tools["create_checkout"].input_schema
    fields = create["properties"]["checkout"]["properties"]
    assert {"line_items", "buyer", "payment", "fulfillment", "discounts"} <= set(fields)
    jsonschema.Draft202012Validator.check_schema(create)
    # the schema is usable as it stands: its $refs resolve from the root
    jsonschema.validate({"meta": {"ucp-agent": {"profile": "https://a.example/p"}},
                         "checkout": {"line_items": [{"item": {"id": "x"}, "quantity": 1}]}}, create)  # fmt: skip
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"meta": {"ucp-agent": {"profile": "https://a.example/p"}},
                             "checkout": {"line_items": [{"quantity": 1}]}}, create)  # fmt: skip
    for name in ("create_checkout", "get_order"):
        assert tools[name].output_schema["required"] == ["ucp"]
    # a buyer is not shown staff verbs (it could only get role_denied); buyer verbs stay listed
    titled = {t.title for t in tools.values() if t.title}
    assert "capability.manifest" in titled and "customer.context" not in titled


async def test_server_discover_without_credentials(shop):
    base, _ = shop
    resp, body = await _rpc(base, {"jsonrpc": "2.0", "id": "d1", "method": "server/discover", "params": {}})
    assert resp.status_code == 200 and body["id"] == "d1"
    result = body["result"]
    assert result["resultType"] == "complete" and "2025-11-25" in result["supportedVersions"]
    assert result["capabilities"] == {"tools": {"listChanged": False}} and result["cacheScope"] == "public"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "ucp-gateway"
    # an error answer to a request echoes its id (a real client matched an id: null to nothing)
    resp, body = await _rpc(base, {"jsonrpc": "2.0", "id": "d2", "method": "server/discover"},
                            {"MCP-Protocol-Version": "2099-01-01"})  # fmt: skip
    assert resp.status_code == 400 and body["id"] == "d2" and body["error"]["code"] == -32022


async def test_unsigned_tool_call_on_a_signing_shop_is_401_with_a_challenge(shop):
    base, platform = shop
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "create_checkout", "arguments": {
        "meta": {"ucp-agent": {"profile": platform.base + "/profile/a.json"}},
        "checkout": {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}}}}  # fmt: skip
    resp, body = await _rpc(base, call)
    assert resp.status_code == 401 and body["id"] == 7 and body["error"]["code"] == -32000
    assert body["error"]["data"]["code"] == "signature_missing"
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="ucp"'
    # a forged bearer token: refused, never downgraded, and the challenge says why
    resp, body = await _rpc(base, call, {"Authorization": "Bearer ucpat_forged"})
    assert resp.status_code == 401 and body["id"] == 7
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="ucp", error="invalid_token"'
    # a REST 401 carries it too
    async with httpx2.AsyncClient(timeout=30) as http:
        rest = await http.get(base + "/ucp/v1/checkout-sessions/chk_x",
                              headers={"UCP-Agent": f'profile="{platform.base}/profile/a.json"'})  # fmt: skip
    assert rest.status_code == 401 and rest.headers["WWW-Authenticate"] == 'Bearer realm="ucp"'


async def test_tools_list_follows_the_declared_profiles_capabilities(shop):
    base, platform = shop
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    profile = platform.base + "/profile/a.json"

    def names(body):
        return {t["name"] for t in body["result"]["tools"]}

    _, everything = await _rpc(base, listing)
    assert {"create_checkout", "get_order"} <= names(everything)
    doc = platform.document()
    del doc["ucp"]["capabilities"]["dev.ucp.shopping.order"]
    platform.raw_document = doc
    _, body = await _rpc(base, listing, {"UCP-Agent": f'profile="{profile}"'})
    assert "create_checkout" in names(body) and "get_order" not in names(body)
    # the same profile named in _meta instead of the header
    meta = {**listing, "params": {"_meta": {"ucp-agent": {"profile": platform.base + "/profile/b.json"}}}}
    _, body = await _rpc(base, meta)
    assert "create_checkout" in names(body) and "get_order" not in names(body)
    # a profile declaring no capability the shop has: no UCP tool at all (verb tools stay)
    platform.raw_document = {**doc, "ucp": {**doc["ucp"], "capabilities": {}}}
    _, body = await _rpc(base, listing, {"UCP-Agent": f'profile="{platform.base}/profile/c.json"'})
    assert not names(body) & {"create_checkout", "get_checkout", "get_order"}
    assert "capability__manifest" in names(body)

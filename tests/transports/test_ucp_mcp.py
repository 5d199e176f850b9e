"""The UCP MCP endpoint with the official MCP SDK client (Streamable HTTP) over a real socket."""

from __future__ import annotations

import json

import aiohttp
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

PROFILE = {"ucp-agent": {"profile": "https://agent.example/.well-known/ucp"}}


async def _session(url, headers):
    client = httpx2.AsyncClient(headers=headers, timeout=30)
    return client


async def test_sdk_client_lists_and_calls_verbs(gateway):
    headers = {"Authorization": f"Bearer {gateway.tokens['owner']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(gateway.url + "/ucp/mcp", http_client=http) as (r, w):
            async with ClientSession(r, w) as s:
                init = await s.initialize()
                assert init.server_info.name == "ucp-gateway"
                tools = (await s.list_tools()).tools
                names = {t.name for t in tools}
                assert "customer__context" in names and "capability__manifest" in names
                assert all("." not in n for n in names)
                assert "gdpr_delete_contact" not in names  # no ucp surface
                res = await s.call_tool("customer__context", {"customer_id": "cust_1"})
                assert not res.is_error
                env = res.structured_content
                assert env["ok"] is True and env["verb"] == "customer.context"
                assert json.loads(res.content[0].text) == env
                # a denial is a result (business outcome), not a protocol error
                res = await s.call_tool("customer__context", {"customer_id": "cust_1", "bogus": 1})
                assert res.is_error and res.structured_content["error"]["reason"] == "invalid_arguments"


async def test_buyer_without_token_sees_buyer_verbs_and_needs_meta(gateway):
    async with httpx2.AsyncClient(timeout=30) as http:
        async with streamable_http_client(gateway.url + "/ucp/mcp", http_client=http) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                tools = (await s.list_tools()).tools
                verbs = {t.name for t in tools if t.title}  # verb tools carry their verb name as title
                # the buyer is shown the verbs a buyer may run; a staff verb is not listed to it
                assert "capability__manifest" in verbs and "customer__context" not in verbs
                assert {"create_checkout", "complete_checkout", "get_order"} <= {t.name for t in tools}
                res = await s.call_tool("capability__manifest", {"meta": PROFILE})
                assert res.structured_content["ok"] is True
                res = await s.call_tool("customer__context", {"customer_id": "cust_1", "meta": PROFILE})
                assert res.structured_content["error"]["reason"] == "role_denied"


async def test_an_unsigned_buyer_calls_verb_tools_as_the_claimed_not_the_verified_profile(gateway):
    """Regression (review): an unsigned call of a verb tool on /ucp/mcp ran as the buyer principal
    of the profile it named in meta, the identity of that platform when it signs."""
    from ucp_gateway.db import tenant_tx

    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "capability__manifest", "arguments": {"meta": PROFILE}},
    }
    status, body, _ = await _post(gateway, call)
    assert status == 200 and body["result"]["structuredContent"]["ok"] is True, body
    async with tenant_tx(gateway.pool, gateway.company.id) as conn:
        entry = await conn.fetchval("SELECT entry FROM verb_audit_log ORDER BY audit_id DESC LIMIT 1")
    entry = json.loads(entry) if isinstance(entry, str) else entry
    assert entry["verb"] == "capability.manifest"
    assert entry["principal"]["subject"] == "unverified:" + PROFILE["ucp-agent"]["profile"]


async def _post(gateway, body, headers=None):
    async with aiohttp.ClientSession() as http:
        async with http.post(
            gateway.url + "/ucp/mcp",
            data=body if isinstance(body, bytes) else json.dumps(body),
            headers={"Content-Type": "application/json", **(headers or {})},
        ) as resp:
            text = await resp.text()
            return resp.status, (json.loads(text) if text else None), resp.headers


async def test_protocol_errors_are_jsonrpc(gateway):
    status, body, _ = await _post(gateway, b"{nope")
    assert status == 400 and body["error"]["code"] == -32700
    status, body, _ = await _post(gateway, {"jsonrpc": "2.0", "id": 3, "method": "resources/list"})
    assert body == {"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "method not found: resources/list"}}
    call = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"name": "capability__manifest", "arguments": {}},
    }
    status, body, _ = await _post(gateway, call)
    assert status == 400 and body["error"]["code"] == -32602 and body["error"]["data"]["code"] == "invalid_profile_url"
    call["params"]["name"] = "no_such_tool"
    status, body, _ = await _post(gateway, call)
    assert body["error"]["code"] == -32602 and body["id"] == 4
    status, body, _ = await _post(gateway, call, {"Authorization": "Bearer ucpgw_st_forged"})
    assert status == 401 and body["error"]["code"] == -32000 and body["id"] == 4
    status, body, _ = await _post(gateway, call, {"MCP-Protocol-Version": "1999-01-01"})
    assert status == 400 and body["error"]["code"] == -32022 and body["id"] == 4  # MCP 2026-07-28's code
    assert body["error"]["data"] == {
        "supported": ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"],
        "requested": "1999-01-01",
    }
    status, body, _ = await _post(gateway, [call], {"MCP-Protocol-Version": "2025-11-25"})
    assert status == 400 and body["error"]["code"] == -32600
    status, body, _ = await _post(gateway, call, {"Origin": "https://evil.example"})
    assert status == 403 and body["error"]["code"] == -32000 and body["id"] == 4
    status, body, _ = await _post(gateway, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert status == 202 and body is None
    status, body, _ = await _post(gateway, call, {"Host": "nobody.test"})  # no company: tenancy layer
    assert status == 404 and body["error"]["code"] == -32000 and body["id"] == 4
    status, body, _ = await _post(gateway, b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "x": "' + b"a" * (2 << 20)
                                  + b'"}')  # fmt: skip
    assert status == 413 and body["jsonrpc"] == "2.0" and "error" in body  # body too large, still JSON-RPC
    async with aiohttp.ClientSession() as http:
        async with http.get(gateway.url + "/ucp/mcp") as resp:
            assert resp.status == 405
    # a charset other than utf-8 is refused too (RFC 8259 §8.1), not read as UTF-8 against its label
    others = ("application/jsonx", "application/json; charset=utf-16")
    for ctype in ("text/plain", "application/x-www-form-urlencoded", *others):
        status, body, _ = await _post(gateway, call, {"Content-Type": ctype})  # never parsed as JSON-RPC
        assert status == 415 and body["error"]["code"] == -32600 and body["id"] == 4  # the id is echoed
        assert body["error"]["data"]["code"] == "unsupported_media_type"
    status, body, _ = await _post(gateway, {"jsonrpc": "2.0", "id": 6, "method": "ping"},
                                  {"Content-Type": "Application/JSON; charset=utf-8"})  # fmt: skip
    assert status == 200 and body == {"jsonrpc": "2.0", "id": 6, "result": {}}


async def test_blocked_verb_is_a_denial_envelope(gateway):
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "customer_delete", "arguments": {"meta": PROFILE}}}  # fmt: skip
    status, body, _ = await _post(gateway, call, {"Authorization": f"Bearer {gateway.tokens['owner']}"})
    assert status == 200 and body["result"]["structuredContent"]["error"]["reason"] == "blocked_verb"


async def test_errors_from_outer_layers_keep_their_shapes(gateway):
    """The MCP error rewrite wraps the foundation layer on /ucp/mcp only (``app[PATH_WRAPPERS]``):
    errors raised before any handler (the %00 refusal, the trust middleware) are JSON-RPC there, with
    the Request-Id kept, and stay REST-shaped ``{"code","content"}`` on every other path."""
    ping = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"})
    headers = {"Content-Type": "application/json", "Request-Id": "outer-1"}
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.url + "/ucp/mcp?x=%00", data=ping, headers=headers) as resp:
            body = await resp.json()
            assert resp.status == 400 and resp.headers["Request-Id"] == "outer-1"
            assert body["jsonrpc"] == "2.0" and body["id"] == 7 and body["error"]["data"]["code"] == "invalid_request"
        async with http.post(gateway.url + "/ucp/mcp", data=ping, headers={**headers, "UCP-Agent": "x"}) as resp:
            body = await resp.json()
            assert resp.status == 400 and resp.headers["Request-Id"] == "outer-1"
            assert (
                body["jsonrpc"] == "2.0" and body["id"] == 7 and body["error"]["data"]["code"] == "invalid_profile_url"
            )
        for url in ("/api/v1/agent/dispatch?x=%00", "/ucp/mcp/?x=%00"):
            async with http.post(gateway.url + url, data=ping, headers=headers) as resp:
                assert resp.status == 400 and resp.headers["Request-Id"] == "outer-1"
                assert (await resp.json())["code"] == "invalid_request", url
        async with http.get(gateway.url + "/ucp/mcp", headers=headers) as resp:  # only POST is rewritten
            assert resp.status == 405 and resp.headers["Request-Id"] == "outer-1"
            assert await resp.json() == {"code": "method_not_allowed", "content": "Method Not Allowed"}

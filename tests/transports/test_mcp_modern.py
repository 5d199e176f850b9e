"""MCP 2026-07-28 (stateless) beside the handshake revisions: the official SDK client in its modern
mode (server/discover, per-request _meta, Mcp-Method / Mcp-Name headers) lists and calls tools;
requests without the headers or _meta are refused with the revision's codes."""

from __future__ import annotations

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.transports.test_mcp_open import _rpc, shop  # noqa: F401 - the fixture

MODERN = "2026-07-28"


async def test_sdk_client_in_the_stateless_revision(shop):  # noqa: F811
    base, platform = shop
    async with httpx2.AsyncClient(timeout=30) as http:
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            found = await s.discover()
            assert MODERN in found.supported_versions and s.protocol_version == MODERN
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert tools["complete_checkout"].input_schema["required"] == ["meta", "id", "checkout"]
            # this shop asks every tool call for a proof: the modern wire carries the refusal as such
            with pytest.raises(MCPError) as err:
                await s.call_tool("create_checkout", {
                    "meta": {"ucp-agent": {"profile": platform.base + "/profile/a.json"}},
                    "checkout": {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}})  # fmt: skip
            assert err.value.code == -32000 and err.value.error.data["code"] == "signature_missing"


async def test_modern_requests_need_the_headers_and_meta(shop):  # noqa: F811
    base, _ = shop
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    listing = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta}}
    resp, body = await _rpc(base, listing, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    assert resp.status_code == 200 and body["result"]["resultType"] == "complete"
    assert body["result"]["cacheScope"] == "private" and body["result"]["ttlMs"] > 0
    resp, body = await _rpc(base, listing, {"MCP-Protocol-Version": MODERN})  # no Mcp-Method
    assert resp.status_code == 400 and body["error"]["code"] == -32020 and body["id"] == 3
    hdrs = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    resp, body = await _rpc(base, {**listing, "params": {}}, hdrs)
    assert resp.status_code == 400 and body["error"]["code"] == -32602 and body["id"] == 3
    call = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "get_checkout", "_meta": meta,
            "arguments": {}}}  # fmt: skip
    resp, body = await _rpc(base, call, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                                         "Mcp-Name": "get_order"})  # fmt: skip
    assert resp.status_code == 400 and body["error"]["code"] == -32020

"""The largest buyer CLI's default agent profile has no spec/schema on its entries and no service
transport: accepted with a counted warning; what would change negotiation stays refused."""

from __future__ import annotations

import json

import httpx2
import pytest

from ucp_gateway.discovery.errors import ProfileMalformed
from ucp_gateway.discovery.profiles import LENIENT_PROFILES, parse_platform_profile

MINIMAL = {"ucp": {"version": "2026-04-08",
                   "services": {"dev.ucp.shopping": [{"version": "2026-04-08",
                                                      "spec": "https://ucp.dev/2026-04-08/specification/overview/"}]},
                   "capabilities": {"dev.ucp.shopping.checkout": [{"version": "2026-04-08"}]},
                   "payment_handlers": {}}}  # fmt: skip


def test_missing_unused_fields_are_a_counted_warning():
    before = LENIENT_PROFILES["spec"]
    p = parse_platform_profile("https://agent.example/p.json", json.dumps(MINIMAL).encode())
    assert set(p.capabilities) == {"dev.ucp.shopping.checkout"} and p.version == "2026-04-08"
    assert LENIENT_PROFILES["spec"] == before + 1 and LENIENT_PROFILES["transport"] >= 1


def test_what_would_change_negotiation_is_still_refused():
    bad = json.loads(json.dumps(MINIMAL))
    del bad["ucp"]["capabilities"]["dev.ucp.shopping.checkout"][0]["version"]
    with pytest.raises(ProfileMalformed):
        parse_platform_profile("https://agent.example/p.json", json.dumps(bad).encode())
    bad = json.loads(json.dumps(MINIMAL))
    bad["ucp"]["capabilities"]["dev.ucp.shopping.checkout"][0]["spec"] = 5
    with pytest.raises(ProfileMalformed):
        parse_platform_profile("https://agent.example/p.json", json.dumps(bad).encode())


async def test_the_minimal_profile_negotiates_on_mcp(shop):
    await shop.policy("optional")
    shop.platform.raw_document = MINIMAL
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(shop.base + "/ucp/mcp", json=listing, headers={"UCP-Agent": f'profile="{shop.profile}"'})
        names = {t["name"] for t in r.json()["result"]["tools"]}
        assert "create_checkout" in names and "get_order" not in names, r.text
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create_checkout", "arguments": {
            "meta": {"ucp-agent": {"profile": shop.profile}},
            "checkout": {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}}}}  # fmt: skip
        r = await http.post(shop.base + "/ucp/mcp", json=call)
    assert r.json()["result"]["structuredContent"]["id"].startswith("chk_"), r.text

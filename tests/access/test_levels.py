"""Access levels decide what runs: an anonymous agent builds a checkout and is handed off at
complete (the buyer confirms on the continue_url page, then that complete runs); orders need a
proof; the company's table overrides; signature policy ``log`` serves and counts what ``required``
refuses, and switching back takes effect at once."""

from __future__ import annotations

import re
import uuid

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from tests.access.conftest import PAYMENT, meta, ready_checkout, sdk_session
from ucp_gateway.levels import DEFAULT_LEVELS, AccessLevel, level_table, permits


def test_the_default_table():
    assert permits(DEFAULT_LEVELS, "anonymous", "checkout") and permits(DEFAULT_LEVELS, "anonymous", "cart")
    assert not permits(DEFAULT_LEVELS, "anonymous", "checkout.complete")
    assert not permits(DEFAULT_LEVELS, AccessLevel.ANONYMOUS, "orders")
    assert permits(DEFAULT_LEVELS, "identified", "orders") and permits(DEFAULT_LEVELS, "linked", "checkout.complete")
    assert permits(DEFAULT_LEVELS, "identified", "no.such.operation")  # an unknown operation needs identified
    assert not permits(DEFAULT_LEVELS, "anonymous", "no.such.operation")
    assert level_table({"checkout.complete": "anonymous"})["checkout.complete"] is AccessLevel.ANONYMOUS
    with pytest.raises(ValueError, match="unknown operation"):
        level_table({"payments": "anonymous"})
    with pytest.raises(ValueError, match="unknown access level"):
        level_table({"orders": "root"})


async def test_anonymous_sdk_client_builds_a_checkout_and_is_handed_off_at_complete(shop):
    await shop.policy("optional")
    async with sdk_session(shop.base) as s:
        co = await ready_checkout(s, shop.profile)
        done = await s.call_tool("complete_checkout", {"meta": meta(shop.profile, str(uuid.uuid4())),
                                                       "id": co["id"], "checkout": PAYMENT})  # fmt: skip
        body = done.structured_content
        assert not done.is_error and body["status"] == "requires_escalation", body
        assert body["continue_url"] == f"{shop.base}/checkout-sessions/{co['id']}"
        handoff = [m for m in body["messages"] if m.get("code") == "buyer_handoff_required"]
        assert handoff and handoff[0]["severity"] == "requires_buyer_input" and "order" not in body
        # the buyer finishes on the continue_url page: confirming there lets this agent complete exactly it
        async with httpx2.AsyncClient(timeout=30) as http:
            page = await http.get(body["continue_url"])
            assert page.status_code == 200 and "confirmation_token" in page.text, page.text[:300]
            form = dict(re.findall(r'name="(confirmation_token|csrf_token)" value="([^"]+)"', page.text))
            csrf = re.search(r"ucpgw_csrf=([^;]+)", page.headers["set-cookie"]).group(1)  # a Secure cookie
            r = await http.post(body["continue_url"] + "/confirm", data={**form, "agree": "yes"},
                                headers={"Sec-Fetch-Site": "same-origin", "Cookie": f"ucpgw_csrf={csrf}"})  # fmt: skip
            assert r.status_code == 303, r.text
        done = await s.call_tool("complete_checkout", {"meta": meta(shop.profile, str(uuid.uuid4())),
                                                       "id": co["id"], "checkout": PAYMENT})  # fmt: skip
        assert done.structured_content["status"] == "completed", done.structured_content
        # order reads need a platform proof (UCP order.md: Get Order MUST be authenticated)
        with pytest.raises(MCPError) as err:
            await s.call_tool("get_order", {"meta": meta(shop.profile), "id": "ord_x"})
        assert err.value.code == -32000 and err.value.error.data["code"] == "unauthorized"


async def test_the_level_is_echoed_and_orders_refused_with_a_challenge_on_rest(shop):
    await shop.policy("optional")
    hdrs = {"UCP-Agent": f'profile="{shop.profile}"'}
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(shop.base + "/ucp/v1/checkout-sessions", headers=hdrs,
                            json={"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]})  # fmt: skip
        assert r.status_code == 201 and r.headers["UCP-Access-Level"] == "anonymous", r.text
        r = await http.get(shop.base + "/ucp/v1/orders/ord_x", headers=hdrs)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"
        assert r.headers["WWW-Authenticate"] == 'Bearer realm="ucp"'


async def test_the_company_table_may_let_anonymous_agents_complete(shop):
    await shop.policy("optional")
    await shop.set("UPDATE companies SET settings = settings || $2::jsonb WHERE id = $1",
                   {"access": {"levels": {"checkout.complete": "anonymous"}}})  # fmt: skip
    async with sdk_session(shop.base) as s:
        co = await ready_checkout(s, shop.profile)
        done = await s.call_tool("complete_checkout", {"meta": meta(shop.profile, str(uuid.uuid4())),
                                                       "id": co["id"], "checkout": PAYMENT})  # fmt: skip
        assert done.structured_content["status"] == "completed", done.structured_content


async def test_an_unreadable_table_fails_closed(shop):
    await shop.policy("optional")
    await shop.set("UPDATE companies SET settings = settings || $2::jsonb WHERE id = $1",
                   {"access": {"levels": {"checkout": 5}}})  # fmt: skip
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.get(shop.base + "/admin/v1/access", headers={"Authorization": f"Bearer {shop.admin}"})
    assert r.status_code == 200 and r.json()["levels"]["checkout"] == "identified"  # strictest table


async def test_log_policy_serves_and_counts_then_strict_refuses_without_restart(shop):
    admin = {"Authorization": f"Bearer {shop.admin}"}
    hdrs = {"UCP-Agent": f'profile="{shop.profile}"'}
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.put(shop.base + "/admin/v1/access/policy", headers=admin, json={"signature_policy": "log"})
        assert r.status_code == 200, r.text
        r = await http.post(shop.base + "/ucp/v1/checkout-sessions", headers=hdrs, json=create)
        assert r.status_code == 201 and r.headers["UCP-Access-Level"] == "anonymous", r.text
        # a wrong signature is served as anonymous too (never as its claim), and counted with its reason
        bad = {**hdrs, "Signature-Input": 'sig1=("@method");created=1;keyid="k"', "Signature": "sig1=:AAAA:"}
        r = await http.post(shop.base + "/ucp/v1/checkout-sessions", headers=bad, json=create)
        assert r.status_code == 201 and r.headers["UCP-Access-Level"] == "anonymous", r.text
        # the MCP door counts an unsigned tool call the same way
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "create_checkout",
                "arguments": {"meta": meta(shop.profile), "checkout": create}}}  # fmt: skip
        r = await http.post(shop.base + "/ucp/mcp", json=call)
        assert r.status_code == 200 and "result" in r.json(), r.text
        r = await http.get(shop.base + "/admin/v1/access", headers=admin)
        view = r.json()
        assert view["signature_policy"] == "log" and view["levels"]["checkout.complete"] == "identified"
        counts = {c["reason"]: c["count"] for c in view["log_policy_counts"]}
        assert counts["signature_missing"] == 2 and sum(counts.values()) == 3, counts
        r = await http.put(shop.base + "/admin/v1/access/policy", headers=admin, json={"signature_policy": "strict"})
        assert r.status_code == 200 and r.json() == {"signature_policy": "required"}
        r = await http.post(shop.base + "/ucp/v1/checkout-sessions", headers=hdrs, json=create)
        assert r.status_code == 401 and r.json()["code"] == "signature_missing"
        # an unknown policy is a 400
        r = await http.put(shop.base + "/admin/v1/access/policy", headers=admin, json={"signature_policy": "lax"})
        assert r.status_code == 400
        # a body that is not a JSON object is a 400 too; one not sent as JSON a 415
        r = await http.put(shop.base + "/admin/v1/access/policy", headers=admin, json=["log"])
        assert r.status_code == 400 and r.json()["code"] == "invalid_request", r.text
        r = await http.put(shop.base + "/admin/v1/access/policy", headers=admin, content=b"log")
        assert r.status_code == 415 and r.json()["code"] == "unsupported_media_type", r.text

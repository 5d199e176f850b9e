"""Acceptance: the official MCP SDK client completes a flower-shop checkout over the UCP MCP endpoint
with every HTTP request signed (RFC 9421, the agent's key published in its platform profile)."""

from __future__ import annotations

import base64
import json
import re
import uuid
from urllib.parse import urlsplit

import httpx2
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.commerce.conftest import Platform
from tests.httpsig.signer import build_base, digest, raw_verify
from ucp_gateway.app import create_app
from ucp_gateway.clock import SystemClock
from ucp_gateway.db import tenant_tx
from ucp_gateway.demo.seed import seed_demo
from ucp_gateway.keys import ensure_active_key, published_jwks
from ucp_gateway.transports.agentkey import AgentKey
from ucp_gateway.transports.names import from_tool_name
from ucp_gateway.transports.ucp_tools import UCP_TOOL_NAMES


class SigningAuth(httpx2.Auth):
    """Signs every request of the SDK's HTTP client with the agent key (transport-level
    Idempotency-Key per POST, as the gateway's verifier requires it covered)."""

    requires_request_body = True

    def __init__(self, key: AgentKey):
        self.key = key

    def auth_flow(self, request):
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        if request.method == "POST":
            headers["Idempotency-Key"] = str(uuid.uuid4())
        signed = self.key.sign(request.method, str(request.url), headers, request.content, now=SystemClock().now())
        for k, v in signed.items():
            request.headers[k] = v
        yield request


@pytest.fixture
async def signed_shop(database, db_settings, tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    platform = Platform()
    await platform.start()
    agent = AgentKey("agent-key-1", key, f"{platform.base}/profile/a.json")
    platform.signing_keys = [agent.public_jwk()]
    company = (await seed_demo(database, db_settings)).company
    # the shop's first key was made at seed time under the test's dev KEK ring, which the app loads too
    s = db_settings.model_copy(
        update={
            "webhook_worker": False,
            "dev_profile_hosts": ["127.0.0.1"],
            "public_scheme": "http",
        }
    )
    app = create_app(s, database=database)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    await ensure_active_key(database.pool, company.id, now=SystemClock().now())
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", agent, company
    finally:
        await runner.cleanup()
        await platform.runner.cleanup()


def _meta(agent, key=None):
    m = {"ucp-agent": {"profile": agent.profile_url}}
    if key:
        m["idempotency-key"] = key
    return m


async def test_signed_mcp_checkout(signed_shop, database):
    base, agent, company = signed_shop
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert {"create_checkout", "get_checkout", "update_checkout", "complete_checkout", "cancel_checkout",
                    "get_order"} <= names  # fmt: skip
            create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 2}]}
            res = await s.call_tool("create_checkout", {"meta": _meta(agent), "checkout": create})
            co = res.structured_content
            assert not res.is_error and co["id"].startswith("chk_") and json.loads(res.content[0].text) == co
            upd = {**create, "fulfillment": {"methods": [{"type": "shipping", "destinations": [{
                "id": "home", "street_address": "1 Elm St", "address_locality": "Springfield",
                "postal_code": "62704", "address_country": "US"}], "selected_destination_id": "home"}]}}  # fmt: skip
            co = await s.call_tool("update_checkout", {"meta": _meta(agent), "id": co["id"], "checkout": upd})
            co = co.structured_content
            group = co["fulfillment"]["methods"][0]["groups"][0]
            upd["fulfillment"]["methods"][0]["groups"] = [
                {"id": group["id"], "selected_option_id": group["options"][0]["id"]}
            ]
            upd["discounts"] = {"codes": ["10OFF"]}
            co = await s.call_tool("update_checkout", {"meta": _meta(agent), "id": co["id"], "checkout": upd})
            co = co.structured_content
            assert co["status"] == "ready_for_complete", co
            pay = {"payment": {"instruments": [{"id": "instr_1", "handler_id": "mock_payment_handler",
                   "type": "card", "credential": {"type": "token", "token": "success_token"}}]}}  # fmt: skip
            # complete needs meta["idempotency-key"]: a protocol error without it
            with pytest.raises(MCPError) as err:
                await s.call_tool("complete_checkout", {"meta": _meta(agent), "id": co["id"], "checkout": pay})
            assert err.value.code == -32602
            key = str(uuid.uuid4())
            done = await s.call_tool("complete_checkout", {"meta": _meta(agent, key), "id": co["id"], "checkout": pay})
            body = done.structured_content
            assert body["status"] == "completed" and body["order"]["id"] and "success_token" not in done.content[0].text
            again = await s.call_tool("complete_checkout", {"meta": _meta(agent, key), "id": co["id"], "checkout": pay})
            assert again.structured_content == body  # idempotent replay
            with pytest.raises(MCPError) as err:  # same key, other payload: 409 -> -32000
                await s.call_tool("complete_checkout", {"meta": _meta(agent, key), "id": co["id"], "checkout": {}})
            assert err.value.code == -32000
            order = await s.call_tool("get_order", {"meta": _meta(agent), "id": body["order"]["id"]})
            assert order.structured_content["id"] == body["order"]["id"]
            missing = await s.call_tool("get_checkout", {"meta": _meta(agent), "id": "chk_nope"})
            assert missing.structured_content["ucp"]["status"] == "error"  # business outcome: a result
            with pytest.raises(MCPError) as err:  # the signer may act only for its own profile
                await s.call_tool("get_checkout", {"meta": {"ucp-agent": {"profile": "https://other.example/p"}},
                                                   "id": co["id"]})  # fmt: skip
            assert err.value.code == -32000
    # Regression (security review): the tools ran the commerce service directly, with no audit row and
    # their own idempotency records; now each call is a verb dispatch, as on the REST binding
    async with tenant_tx(database.pool, company.id) as conn:
        rows = await conn.fetch("SELECT verb, decision FROM verb_audit_log ORDER BY audit_id")
        keyed = await conn.fetchval("SELECT count(*) FROM verb_idempotency WHERE key = $1", key)
        direct = await conn.fetchval("SELECT count(*) FROM commerce_idempotency")
    audit = [(r["verb"], r["decision"]) for r in rows]
    writes = [v for v, d in audit if d == "allowed" and v.startswith(("checkout.c", "checkout.u"))]
    assert writes == ["checkout.create", "checkout.update", "checkout.update", "checkout.complete"], audit
    assert ("checkout.complete", "replayed") in audit and {"checkout.get", "orders.get"} <= {v for v, _ in audit}
    assert keyed == 1 and direct == 0


async def test_one_idempotency_key_is_one_request_across_rest_and_mcp(signed_shop):
    """The MCP tools share the REST binding's idempotency store: a key used on REST and then on MCP
    for another request is a conflict (409 -> -32000), not a second execution."""
    base, agent, _ = signed_shop
    key = str(uuid.uuid4())
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        hdrs = {"UCP-Agent": f'profile="{agent.profile_url}"', "Content-Type": "application/json"}
        body = json.dumps(create).encode()
        signed = agent.sign("POST", base + "/ucp/v1/checkout-sessions", {**hdrs, "Idempotency-Key": key}, body,
                            now=SystemClock().now())  # fmt: skip
        rest = await httpx2.AsyncClient(timeout=30).post(
            base + "/ucp/v1/checkout-sessions", content=body, headers={**hdrs, "Idempotency-Key": key, **signed}
        )
        assert rest.status_code == 201, rest.text
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            with pytest.raises(MCPError) as err:
                await s.call_tool("create_checkout", {"meta": _meta(agent, key), "checkout": create})
            assert err.value.code == -32000 and "idempotency" in str(err.value.error.data).lower(), err.value.error


async def test_unsigned_request_is_a_jsonrpc_error(signed_shop):
    base, agent, _ = signed_shop
    call = {"jsonrpc": "2.0", "id": 11, "method": "tools/call",
            "params": {"name": "get_checkout", "arguments": {"meta": _meta(agent), "id": "chk_x"}}}  # fmt: skip
    async with httpx2.AsyncClient(timeout=30) as http:
        resp = await http.post(base + "/ucp/mcp", json=call, headers={"UCP-Agent": f'profile="{agent.profile_url}"'})
    body = resp.json()
    assert resp.status_code == 401 and body["id"] == 11 and body["error"]["code"] == -32000
    assert body["error"]["data"]["code"]


async def test_deeply_nested_body_is_a_parse_error(signed_shop):
    """Regression: a signed body of 100k nested arrays raised RecursionError past the error
    middleware and came back as a plain-text 500."""
    base, agent, _ = signed_shop
    raw = b"[" * 100_000 + b"]" * 100_000
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        resp = await http.post(
            base + "/ucp/mcp",
            content=raw,
            headers={"UCP-Agent": f'profile="{agent.profile_url}"', "Content-Type": "application/json"},
        )
    assert resp.status_code == 400 and resp.headers["Content-Type"].startswith("application/json")
    assert resp.json()["error"]["code"] == -32700


async def test_the_checkout_verbs_as_generic_tools_refuse_cleanly(signed_shop, caplog):
    """Regression (security review): checkout.create & co. are also listed as generic verb tools on
    /ucp/mcp (``checkout__create``), where no UCP context is negotiated: each call logged a LookupError
    traceback and answered execution_failed. Now: a clean surface_not_allowed refusal."""
    base, agent, _ = signed_shop
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            res = await s.call_tool("checkout__create", {"meta": _meta(agent), "method": "POST", "path": "/x",
                                                          "body_text": "{}", "raw_sha256": "0" * 64})  # fmt: skip
    env = res.structured_content
    assert res.is_error and env["ok"] is False and env["error"]["reason"] == "surface_not_allowed", env
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]


async def _rest_create(base, agent, key: str) -> httpx2.Response:
    """A signed REST create carrying ``Idempotency-Key: key``."""
    hdrs = {"UCP-Agent": f'profile="{agent.profile_url}"', "Content-Type": "application/json", "Idempotency-Key": key}
    body = json.dumps({"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}).encode()
    signed = agent.sign("POST", base + "/ucp/v1/checkout-sessions", hdrs, body, now=SystemClock().now())
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(base + "/ucp/v1/checkout-sessions", content=body, headers={**hdrs, **signed})


async def test_one_idempotency_key_rule_on_rest_and_mcp(signed_shop):
    """Regression: the MCP tools took any meta["idempotency-key"] of 1-255 characters (control
    characters included) while REST's Idempotency-Key header must be 1-128 printable characters, so a
    key refused on one binding ran on the other. Both now apply one rule (commerce.idempotency.check_key)."""
    base, agent, _ = signed_shop
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    suffix = uuid.uuid4().hex  # fresh keys per run
    good = ["k" * (128 - len(suffix)) + suffix, f"a key with spaces {suffix}"]
    too_long = ["k" * 129, "k" * 255]
    unprintable = [f"tab\tkey-{suffix}", f"ctl\x01key-{suffix}", f"line\u2028sep-{suffix}"]
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            for key in good:
                res = await s.call_tool("create_checkout", {"meta": _meta(agent, key), "checkout": create})
                assert not res.is_error and res.structured_content["id"].startswith("chk_"), res
            for key in too_long + unprintable:
                with pytest.raises(MCPError) as err:
                    await s.call_tool("create_checkout", {"meta": _meta(agent, key), "checkout": create})
                assert err.value.code == -32602, (key, err.value.error)
                assert err.value.error.data["code"] == "invalid_request", (key, err.value.error)
                assert "1-128 printable characters" in err.value.error.message, (key, err.value.error)
            # the key must be a string (JSON can carry other types, a header cannot)
            with pytest.raises(MCPError) as err:
                await s.call_tool("cancel_checkout", {"meta": {**_meta(agent), "idempotency-key": 7}, "id": "chk_x"})
            assert err.value.code == -32602 and "printable" in err.value.error.message
    # the REST binding: the same verdict for every key an HTTP field can carry (no U+0001 nor U+2028)
    for key in good:
        other = key[:-1] + ("0" if key[-1] != "0" else "1")  # the MCP create used ``key`` already
        rest = await _rest_create(base, agent, other)
        assert rest.status_code == 201, (other, rest.text)
    for key in [*too_long, unprintable[0]]:
        rest = await _rest_create(base, agent, key)
        assert rest.status_code == 400 and rest.json()["code"] == "invalid_request", (key, rest.text)
        assert "1-128 printable characters" in rest.json()["content"], rest.text


def _verify_response_signature(resp: httpx2.Response, jwks: list[dict]) -> None:
    """The gateway's RFC 9421 signature of ``resp`` verifies under its published key (base built by
    hand from the covered components, as tests/httpsig/test_middleware.py does)."""
    assert resp.headers["Content-Digest"] == digest(resp.content)
    params = resp.headers["Signature-Input"].split("=", 1)[1]
    req = resp.request
    values = {
        '"@status"': str(resp.status_code),
        '"content-digest"': resp.headers["Content-Digest"],
        '"content-type"': resp.headers["Content-Type"],
        '"@method";req': req.method,
        '"@authority";req': urlsplit(str(req.url)).netloc,
        '"@path";req': urlsplit(str(req.url)).path,
        '"content-digest";req': req.headers["Content-Digest"],
        '"ucp-agent";req': req.headers.get("UCP-Agent"),
        '"idempotency-key";req': req.headers.get("Idempotency-Key"),
    }
    covered = re.findall(r'"[^"]+"(?:;req)?', params[: params.index(")")])
    kid = re.search(r'keyid="([^"]+)"', params).group(1)
    (jwk,) = [k for k in jwks if k["kid"] == kid]
    sig = base64.b64decode(resp.headers["Signature"].split(":")[1])
    raw_verify(jwk, build_base([(c, values[c]) for c in covered], params), sig)


async def test_every_mcp_complete_response_is_signed(signed_shop, database):
    """Regression: complete_checkout marked its response for signing only once the verb was about to
    run, so a refusal before it (arguments, caller profile, idempotency key) went out unsigned, while
    REST signs every complete response. Now ``tools/call`` marks it first."""
    base, agent, company = signed_shop
    jwks = await published_jwks(database.pool, company.id)
    other = {"ucp-agent": {"profile": "https://other.example/p"}}
    refusals = {
        "no key": ({"meta": _meta(agent), "id": "chk_x"}, 400, -32602),
        "bad key": ({"meta": _meta(agent, "k" * 129), "id": "chk_x"}, 400, -32602),
        "no id": ({"meta": _meta(agent, str(uuid.uuid4()))}, 400, -32602),
        "no checkout": ({"meta": _meta(agent, str(uuid.uuid4())), "id": "chk_x"}, 400, -32602),  # required
        "arguments not an object": ([], 200, -32602),
        "another agent's profile": ({"meta": other, "id": "chk_x"}, 403, -32000),
    }
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        for n, (i, (arguments, status, code)) in enumerate(refusals.items()):
            call = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                    "params": {"name": "complete_checkout", "arguments": arguments}}  # fmt: skip
            resp = await http.post(base + "/ucp/mcp", json=call)
            assert resp.status_code == status and resp.json()["error"]["code"] == code, (i, resp.text)
            assert "Signature" in resp.headers, (i, dict(resp.headers))
            _verify_response_signature(resp, jwks)
        # the business outcome of a complete (unknown checkout: a result, not an error) is signed too
        call = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {
                "name": "complete_checkout",
                "arguments": {
                    "meta": _meta(agent, str(uuid.uuid4())),
                    "id": "chk_nope",
                    "checkout": {
                        "payment": {"instruments": [{"id": "i1", "handler_id": "mock_payment_handler", "type": "card"}]}
                    },
                },
            },
        }
        resp = await http.post(base + "/ucp/mcp", json=call)
        assert resp.status_code == 200 and "result" in resp.json(), resp.text
        _verify_response_signature(resp, jwks)
        # as on REST, the other operations are not signed unless asked (Accept-Signature, settings)
        call["params"] = {"name": "get_checkout", "arguments": {"meta": _meta(agent)}}
        resp = await http.post(base + "/ucp/mcp", json=call)
        assert resp.json()["error"]["code"] == -32602 and "Signature" not in resp.headers, resp.text


SHOPPING_VERBS = {"checkout.create", "checkout.get", "checkout.update", "checkout.complete", "checkout.cancel",
                  "orders.get"}  # fmt: skip


async def test_the_checkout_verbs_are_no_generic_tools(signed_shop):
    """Regression: tools/list on /ucp/mcp offered checkout__create ... orders__get, generic verb tools
    that refuse every call (surface_not_allowed: only the UCP binding runs those verbs). A tool that
    always refuses is not listed; the binding's own tools are, and the ucp verb manifest still lists
    the verbs (they are verbs of that surface, run through the binding)."""
    base, agent, _ = signed_shop
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            tools = {t.name for t in (await s.list_tools()).tools}
            assert not {from_tool_name(n) for n in tools} & SHOPPING_VERBS, sorted(tools)
            assert set(UCP_TOOL_NAMES) <= tools and "capability__manifest" in tools
            # the call a client could still make by name refuses by the same predicate
            verb_args = {"id": "ord_x", "method": "GET", "path": "/x", "body_text": "", "raw_sha256": "0" * 64}
            res = await s.call_tool("orders__get", {"meta": _meta(agent), **verb_args})
            assert res.structured_content["error"]["reason"] == "surface_not_allowed", res.structured_content
            manifest = await s.call_tool("capability__manifest", {"meta": _meta(agent), "prefix": "checkout"})
            rows = manifest.structured_content["result"]["rows"]
            assert {"checkout.create", "checkout.complete"} <= {row["name"] for row in rows}, rows
    async with httpx2.AsyncClient(timeout=30) as http:  # the public manifest (GET, unsigned)
        resp = await http.get(base + "/api/v1/agent/verbs?surface=ucp")
        assert SHOPPING_VERBS <= {record["name"] for record in resp.json()}, resp.text


async def test_attribution_on_mcp_create_and_update(signed_shop):
    """UCP ``attribution`` on create_checkout and update_checkout is a result, as on REST; it once
    raised inside validation and came back as -32000 ``unavailable`` with ``retry_after`` 1."""
    base, agent, _company = signed_shop
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}],
                      "attribution": {"utm_source": "gemini", "click_id": "c-1"}}  # fmt: skip
            res = await s.call_tool("create_checkout", {"meta": _meta(agent), "checkout": create})
            assert not res.is_error and res.structured_content["id"].startswith("chk_"), res
            upd = {**create, "attribution": {"utm_campaign": "spring"}}
            cid = res.structured_content["id"]
            res = await s.call_tool("update_checkout", {"meta": _meta(agent), "id": cid, "checkout": upd})
            assert not res.is_error and res.structured_content["id"] == cid, res
            with pytest.raises(MCPError) as err:  # not a map of strings: invalid params, no retry
                await s.call_tool("create_checkout", {"meta": _meta(agent), "checkout": {**create, "attribution": 7}})
            assert err.value.code == -32602 and "retry_after" not in (err.value.error.data or {}), err.value.error

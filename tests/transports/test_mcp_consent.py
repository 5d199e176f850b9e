"""Consent inside an MCP call, with the official SDK client against a real server socket: a
complete_checkout above the agent's amount limit asks the buyer through the client's elicitation
(a request-scoped SSE stream on 2025-11-25, an input_required round trip on 2026-07-28); a yes
completes it once, a no leaves the escalation and its continue_url; a replayed answer or state runs
nothing; a client that declared no elicitation (or an older revision) gets the escalation."""

from __future__ import annotations

import contextlib
import re
import uuid

import httpx2
import mcp_types as types
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.commerce.conftest import Platform
from tests.transports.test_ucp_mcp_checkout import SigningAuth, _meta
from ucp_gateway.app import create_app
from ucp_gateway.clock import SystemClock
from ucp_gateway.db import tenant_tx
from ucp_gateway.demo.seed import seed_demo
from ucp_gateway.keys import ensure_active_key
from ucp_gateway.transports.agentkey import AgentKey

LIMIT = 1000  # minor units: two ceramic pots with shipping are above it
PAY = {"payment": {"instruments": [{"id": "instr_1", "handler_id": "mock_payment_handler", "type": "card",
                                    "credential": {"type": "token", "token": "success_token"}}]}}  # fmt: skip


def _settings(db_settings, **extra):
    return db_settings.model_copy(update={"webhook_worker": False, "dev_profile_hosts": ["127.0.0.1"],
                                          "public_scheme": "http", **extra})  # fmt: skip


@contextlib.asynccontextmanager
async def _serving(settings, database):
    """One replica of the gateway on a real socket: yields its port."""
    runner = web.AppRunner(create_app(settings, database=database))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]
    finally:
        await runner.cleanup()


@pytest.fixture
async def shop(database, db_settings):
    key = ec.generate_private_key(ec.SECP256R1())
    platform = await Platform().start()
    agent = AgentKey("agent-key-1", key, f"{platform.base}/profile/a.json")
    platform.signing_keys = [agent.public_jwk()]
    company = (await seed_demo(database, db_settings)).company
    try:
        async with _serving(_settings(db_settings, buyer_max_order_amount=LIMIT), database) as port:
            await ensure_active_key(database.pool, company.id, now=SystemClock().now())
            yield f"http://127.0.0.1:{port}", agent, company
    finally:
        await platform.runner.cleanup()


class Person:
    """The elicitation callback: records what was asked and answers as told."""

    def __init__(self, action: str = "accept", content: dict | None = None):
        self.action, self.content, self.asked, self.ids = action, content, [], []

    async def __call__(self, context, params):
        self.asked.append(params)
        self.ids.append(context.request_id)
        content = self.content if self.action == "accept" and params.mode == "form" else None
        return types.ElicitResult(action=self.action, content=content)


async def _ready(s, agent) -> dict:
    """A checkout of two ceramic pots shipped to the US, ready to complete (above LIMIT)."""
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 2}]}
    co = (await s.call_tool("create_checkout", {"meta": _meta(agent), "checkout": create})).structured_content
    upd = {**create, "fulfillment": {"methods": [{"type": "shipping", "destinations": [{
        "id": "home", "street_address": "1 Elm St", "address_locality": "Springfield",
        "postal_code": "62704", "address_country": "US"}], "selected_destination_id": "home"}]}}  # fmt: skip
    co = (
        await s.call_tool("update_checkout", {"meta": _meta(agent), "id": co["id"], "checkout": upd})
    ).structured_content
    group = co["fulfillment"]["methods"][0]["groups"][0]
    upd["fulfillment"]["methods"][0]["groups"] = [{"id": group["id"], "selected_option_id": group["options"][0]["id"]}]
    co = (
        await s.call_tool("update_checkout", {"meta": _meta(agent), "id": co["id"], "checkout": upd})
    ).structured_content
    assert co["status"] == "ready_for_complete", co
    assert next(t["amount"] for t in co["totals"] if t["type"] == "total") > LIMIT
    return co


def _client(base, agent, http, person, mode):
    transport = streamable_http_client(base + "/ucp/mcp", http_client=http)
    return Client(transport, mode=mode, elicitation_callback=person)


async def _orders(database, company, cid) -> int:
    async with tenant_tx(database.pool, company.id) as conn:
        return await conn.fetchval("SELECT count(*) FROM orders WHERE checkout_id = $1", cid)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_buyer_confirms_inside_the_call_and_it_completes_once(shop, database, mode):
    base, agent, company = shop
    person = Person(content={"agree": True})
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with _client(base, agent, http, person, mode) as c:
            assert c.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
            co = await _ready(c, agent)
            done = await c.call_tool("complete_checkout", {"meta": _meta(agent, str(uuid.uuid4())), "id": co["id"],
                                                           "checkout": PAY})  # fmt: skip
    body = done.structured_content
    assert body["status"] == "completed" and body["order"]["id"].startswith("ord_"), body
    assert len(person.asked) == 1 and person.asked[0].mode == "form"
    asked = person.asked[0]
    assert "Confirm your order" in asked.message and "Ceramic" in asked.message
    assert asked.requested_schema["required"] == ["agree"]
    assert await _orders(database, company, co["id"]) == 1
    async with tenant_tx(database.pool, company.id) as conn:
        spent = await conn.fetchval("SELECT count(*) FROM mcp_elicitations WHERE spent_at IS NOT NULL")
        confirmed = await conn.fetchval("SELECT count(*) FROM checkout_confirmations WHERE checkout_id = $1", co["id"])
    assert spent == 1 and confirmed == 1


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_no_leaves_the_escalation_and_its_continue_url(shop, database, mode, action):
    base, agent, company = shop
    person = Person(action)
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with _client(base, agent, http, person, mode) as c:
            co = await _ready(c, agent)
            res = await c.call_tool("complete_checkout", {"meta": _meta(agent, str(uuid.uuid4())), "id": co["id"],
                                                          "checkout": PAY})  # fmt: skip
    body = res.structured_content
    assert len(person.asked) == 1
    assert body["status"] == "requires_escalation" and body["continue_url"].endswith(f"/checkout-sessions/{co['id']}")
    assert any(m["code"] == "amount_limit_exceeded" for m in body["messages"])
    assert await _orders(database, company, co["id"]) == 0


async def test_a_form_that_does_not_agree_is_a_no(shop, database):
    base, agent, company = shop
    person = Person(content={"agree": False})
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with _client(base, agent, http, person, "legacy") as c:
            co = await _ready(c, agent)
            res = await c.call_tool("complete_checkout", {"meta": _meta(agent, str(uuid.uuid4())), "id": co["id"],
                                                          "checkout": PAY})  # fmt: skip
    assert res.structured_content["status"] == "requires_escalation"
    assert await _orders(database, company, co["id"]) == 0


async def test_a_replayed_answer_runs_nothing(shop, database):
    """2025-11-25: the answer POSTed again to the same question is 409; 2026-07-28: the same
    requestState again is -32602 consent_state_invalid; neither places a second order."""
    base, agent, company = shop
    person = Person(content={"agree": True})
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        async with _client(base, agent, http, person, "legacy") as c:
            co = await _ready(c, agent)
            await c.call_tool("complete_checkout", {"meta": _meta(agent, str(uuid.uuid4())), "id": co["id"],
                                                    "checkout": PAY})  # fmt: skip
        again = {"jsonrpc": "2.0", "id": person.ids[0], "result": {"action": "accept", "content": {"agree": True}}}
        r = await http.post(base + "/ucp/mcp", json=again, headers={"MCP-Protocol-Version": "2025-11-25"})
        assert r.status_code == 409 and r.json()["error"]["data"]["code"] == "consent_state_invalid"
        assert await _orders(database, company, co["id"]) == 1

        async with _client(base, agent, http, Person(), "2026-07-28") as c:
            co = await _ready(c, agent)
            args = {"meta": _meta(agent, str(uuid.uuid4())), "id": co["id"], "checkout": PAY}
            first = await c.session.call_tool("complete_checkout", args, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            ask = first.input_requests["confirm"]
            assert ask.method == "elicitation/create" and ask.params.mode == "form"
            yes = {"confirm": types.ElicitResult(action="accept", content={"agree": True})}
            done = await c.session.call_tool("complete_checkout", args, input_responses=yes,
                                             request_state=first.request_state, allow_input_required=True)  # fmt: skip
            assert done.structured_content["status"] == "completed"
            with pytest.raises(MCPError) as err:
                await c.session.call_tool("complete_checkout", args, input_responses=yes,
                                          request_state=first.request_state, allow_input_required=True)  # fmt: skip
            assert err.value.code == -32602 and err.value.error.data["code"] == "consent_state_invalid"
            # a state is bound to its call: another checkout's arguments cannot spend it
            other = await _ready(c, agent)
            args2 = {**args, "meta": _meta(agent, str(uuid.uuid4())), "id": other["id"]}
            first = await c.session.call_tool("complete_checkout", args2, allow_input_required=True)
            with pytest.raises(MCPError):
                await c.session.call_tool("complete_checkout", args, input_responses=yes,
                                          request_state=first.request_state, allow_input_required=True)  # fmt: skip
    assert await _orders(database, company, co["id"]) == 1 and await _orders(database, company, other["id"]) == 0


async def test_without_elicitation_the_call_answers_the_escalation(shop, database):
    """No elicitation capability declared, or the 2025-03-26 revision: no question, the escalation
    with continue_url (where the buyer confirms on the page)."""
    base, agent, company = shop
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        for mode in ("legacy", "2026-07-28"):
            async with Client(streamable_http_client(base + "/ucp/mcp", http_client=http), mode=mode) as c:
                co = await _ready(c, agent)
                res = await c.call_tool("complete_checkout", {"meta": _meta(agent, str(uuid.uuid4())),
                                                              "id": co["id"], "checkout": PAY})  # fmt: skip
            assert res.structured_content["status"] == "requires_escalation"
            assert res.structured_content["continue_url"]
        # a session id that claims elicitation but was not issued by this gateway claims nothing
        async with streamable_http_client(base + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            co = await _ready(s, agent)
        forged = "mcs1.eyJjIjoieCIsImUiOlsiZm9ybSJdfQ.AAAA"
        call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "complete_checkout",
                "arguments": {"meta": _meta(agent, str(uuid.uuid4())), "id": co["id"], "checkout": PAY}}}  # fmt: skip
        r = await http.post(base + "/ucp/mcp", json=call, headers={
            "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": forged,
            "Accept": "application/json, text/event-stream"})  # fmt: skip
        assert r.headers["Content-Type"].startswith("application/json")
        assert r.json()["result"]["structuredContent"]["status"] == "requires_escalation"
    assert await _orders(database, company, co["id"]) == 0


async def test_a_verb_pending_a_click_asks_the_person_and_runs_once(shop, database):
    """A staff token's write verb over /ucp/mcp: the click it needs is asked inside the call; yes runs
    it (one audit row allowed), no answers the pending envelope. A human-only verb is no tool of this
    door (surface_not_allowed), and nothing is asked for it."""
    import datetime as dt

    from ucp_gateway.keys.admin_tokens import create_admin_token

    base, _, company = shop
    token, _ = await create_admin_token(database.pool, company.id, "owner", now=dt.datetime.now(dt.UTC))
    update = {"contact_id": 1, "status": "vip"}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        for mode in ("legacy", "2026-07-28"):
            yes, no = Person(content={"confirm": True}), Person("decline")
            async with _client(base, None, http, yes, mode) as c:
                done = await c.call_tool("crm_contact_update", update)
            assert done.structured_content["ok"] is True and len(yes.asked) == 1, done.structured_content
            assert yes.asked[0].requested_schema["required"] == ["confirm"]
            async with _client(base, None, http, no, mode) as c:
                res = await c.call_tool("crm_contact_update", update)
            assert res.structured_content["error"]["reason"] == "dispatch_pending" and len(no.asked) == 1
            person = Person(content={"confirm": True})
            async with _client(base, None, http, person, mode) as c:
                refund = await c.call_tool("payments__refund", {"order_id": "ord_1", "amount": 100, "currency": "USD"})
            assert person.asked == [] and refund.structured_content["ok"] is False
    async with tenant_tx(database.pool, company.id) as conn:
        rows = await conn.fetch(
            "SELECT decision FROM verb_audit_log WHERE verb = 'crm_contact_update' ORDER BY audit_id"
        )
    assert [r["decision"] for r in rows].count("allowed") == 2  # once per revision, only after a yes


async def test_a_revision_without_elicitation_is_not_asked(shop):
    """2025-03-26 has no elicitation: an initialize declaring it gets no session id, and its calls
    answer the escalation as before."""
    base, agent, _ = shop
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26",
            "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    async with httpx2.AsyncClient(auth=SigningAuth(agent), timeout=30) as http:
        r = await http.post(base + "/ucp/mcp", json=init)
        assert r.status_code == 200 and r.json()["result"]["protocolVersion"] == "2025-03-26"
        assert "Mcp-Session-Id" not in r.headers
        init["params"]["protocolVersion"] = "2025-11-25"
        r = await http.post(base + "/ucp/mcp", json=init)
        assert r.headers["Mcp-Session-Id"].startswith("mcs1.")


def test_a_human_only_pending_is_never_asked():
    """Only the approval page confirms a human-only verb: its pending envelope makes no question."""
    from ucp_gateway.transports.mcp_consent import verb_ask

    env = {"ok": False, "verb": "payments.refund", "error": {"reason": "dispatch_pending", "message": "m"},
           "pending": {"confirm": "human", "required_phrase": "REFUND 100", "approval_url": "https://x/a"}}  # fmt: skip
    assert verb_ask(env, "payments.refund", None) is None
    typed = {**env, "pending": {"confirm": "typed_phrase", "required_phrase": "P", "nonce": "n"}}
    ask = verb_ask(typed, "v", "k")
    assert ask is not None and ask.state["nonce"] == "n" and ask.schema["required"] == ["typed_phrase"]


@pytest.fixture
async def open_shop(database, db_settings):
    """The demo shop with signatures optional: an unsigned agent is anonymous (may not place orders)."""
    platform = await Platform().start()
    company = (await seed_demo(database, db_settings)).company
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'optional' WHERE id = $1", company.id)
    try:
        async with _serving(_settings(db_settings), database) as port:
            yield f"http://127.0.0.1:{port}", platform, company
    finally:
        await platform.runner.cleanup()


class PayingPerson(Person):
    """Answers a url elicitation as a person would: opens the page, pays there with a demo card, accepts."""

    async def __call__(self, context, params):
        self.asked.append(params)
        assert params.mode == "url"
        async with httpx2.AsyncClient(timeout=30) as browser:
            page = await browser.get(params.url)
            tokens = re.findall(r'name="confirmation_token" value="([^"]+)"', page.text)
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
            form = {"confirmation_token": tokens[-1], "csrf_token": csrf, "card_number": "4242424242061234",
                    "card_expiry": "12/39", "agree": "yes"}  # fmt: skip
            # the CSRF cookie is Secure: browsers send it to http://127.0.0.1, httpx does not by itself
            browser.cookies.set("ucpgw_csrf", page.cookies["ucpgw_csrf"])
            r = await browser.post(params.url + "/pay", data=form, follow_redirects=True)
            assert r.status_code == 200 and "your order is placed" in r.text, r.text  # after the 303
        return types.ElicitResult(action="accept")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_anonymous_agent_hands_the_buyer_the_page_in_url_mode(open_shop, database, mode):
    """buyer_handoff_required is asked in url mode only (the agent's own yes proves nothing): the
    person pays on the continue_url page, and the call answers the checkout completed with its order."""
    base, platform, company = open_shop
    meta = {"ucp-agent": {"profile": platform.base + "/profile/a.json"}}
    person = PayingPerson()
    async with httpx2.AsyncClient(timeout=30) as http, _client(base, None, http, person, mode) as c:
        create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}], "fulfillment": {"methods": [{
            "type": "shipping", "destinations": [{"id": "home", "street_address": "1 Elm St",
            "address_locality": "Springfield", "postal_code": "62704", "address_country": "US"}],
            "selected_destination_id": "home"}]}}  # fmt: skip
        co = (await c.call_tool("create_checkout", {"meta": meta, "checkout": create})).structured_content
        group = co["fulfillment"]["methods"][0]["groups"][0]
        create["fulfillment"]["methods"][0]["groups"] = [{"id": group["id"],
                                                          "selected_option_id": group["options"][0]["id"]}]  # fmt: skip
        co = (
            await c.call_tool("update_checkout", {"meta": meta, "id": co["id"], "checkout": create})
        ).structured_content
        done = await c.call_tool("complete_checkout", {"meta": {**meta, "idempotency-key": str(uuid.uuid4())},
                                                       "id": co["id"], "checkout": PAY})  # fmt: skip
    body = done.structured_content
    assert len(person.asked) == 1 and person.asked[0].url == co["continue_url"]
    assert body["status"] == "completed" and body["order"]["id"].startswith("ord_"), body
    assert await _orders(database, company, co["id"]) == 1


class AnswersToOtherReplica(httpx2.Auth):
    """Sends the client's JSON-RPC responses (its answers to our questions) to another replica."""

    requires_request_body = True

    def __init__(self, inner: httpx2.Auth, port: int):
        self.inner, self.port, self.rerouted = inner, port, 0

    def auth_flow(self, request):
        if request.method == "POST" and b'"method"' not in request.content and b'"result"' in request.content:
            request.url = request.url.copy_with(port=self.port)
            request.headers["Host"] = f"127.0.0.1:{self.port}"
            self.rerouted += 1
        yield from self.inner.auth_flow(request)


async def test_the_answer_reaches_the_waiting_call_through_another_replica(shop, database, db_settings):
    """Two replicas on one database: the call's SSE stream is on one, the client's answer lands on
    the other; the waiting call still resumes (the question is a row, not memory) and completes once."""
    base, agent, company = shop
    async with _serving(_settings(db_settings, buyer_max_order_amount=LIMIT), database) as other:
        route = AnswersToOtherReplica(SigningAuth(agent), other)
        person = Person(content={"agree": True})
        async with (
            httpx2.AsyncClient(auth=route, timeout=30) as http,
            _client(base, agent, http, person, "legacy") as c,
        ):
            co = await _ready(c, agent)
            done = await c.call_tool("complete_checkout", {"meta": _meta(agent, str(uuid.uuid4())), "id": co["id"],
                                                           "checkout": PAY})  # fmt: skip
    assert route.rerouted == 1 and done.structured_content["status"] == "completed"
    assert await _orders(database, company, co["id"]) == 1

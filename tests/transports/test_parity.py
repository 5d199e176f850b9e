"""Parity across the five doors (solid-verbs spec/manifest.md "Parity invariant").

Doors: ``http`` (POST /api/v1/agent/dispatch), ``cli`` (the real ``ucp-gateway`` process with
--gateway), ``mcp_stdio`` (the real ``ucp-gateway mcp`` bridge through the SDK stdio client),
``webmcp`` (cookie + CSRF execute) and ``ucp`` (JSON-RPC tools/call on /ucp/mcp).
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack

import aiohttp
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ucp_gateway.db import tenant_tx
from ucp_gateway.transports.mcp_tools import split_control
from ucp_gateway.transports.names import from_tool_name, to_tool_name
from ucp_gateway.transports.remote import GatewayClient
from ucp_gateway.transports.sessions import COOKIE_NAME
from ucp_gateway.verbs.manifest import listed
from ucp_gateway.verbs.web import VERBS

from .test_remote import CLI, _env, cli

DOORS = ("http", "cli", "mcp_stdio", "webmcp", "ucp")
META = {"ucp-agent": {"profile": "https://agent.example/p.json"}}


class Doors:
    """One caller role, every door."""

    def __init__(self, gateway, role: str, stack: AsyncExitStack):
        self.gw, self.role, self.stack = gateway, role, stack
        self.token = gateway.tokens[role]
        self.http: aiohttp.ClientSession | None = None
        self.stdio: ClientSession | None = None
        self.cookie = self.csrf = None

    async def start(self):
        self.http = await self.stack.enter_async_context(aiohttp.ClientSession())
        params = StdioServerParameters(command=CLI, args=["mcp", "--gateway", self.gw.url],
                                       env=_env(UCPGW_TOKEN=self.token))  # fmt: skip
        r, w = await self.stack.enter_async_context(stdio_client(params))
        self.stdio = await self.stack.enter_async_context(ClientSession(r, w))
        await self.stdio.initialize()
        async with self.http.post(self.gw.url + "/api/v1/webmcp/session",
                                  headers={"Authorization": f"Bearer {self.token}"}) as resp:  # fmt: skip
            self.csrf = (await resp.json())["csrf_token"]
            self.cookie = resp.cookies[COOKIE_NAME].value
        return self

    async def visible(self, door: str) -> set[str]:
        if door in ("http", "cli"):
            async with GatewayClient(self.gw.url, surface=door) as c:
                return {r["name"] for r in await c.manifest()}
        if door == "mcp_stdio":
            return {from_tool_name(t.name) for t in (await self.stdio.list_tools()).tools}
        if door == "webmcp":
            async with self.http.get(self.gw.url + "/api/v1/webmcp/manifest?surface=dashboard") as resp:
                return {from_tool_name(t["name"]) for t in (await resp.json())["tools"]}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        async with self.http.post(self.gw.url + "/ucp/mcp", json=body,
                                  headers={"Authorization": f"Bearer {self.token}"}) as resp:  # fmt: skip
            tools = (await resp.json())["result"]["tools"]
        return {from_tool_name(t["name"]) for t in tools if "title" in t}  # verbs carry their name as title

    async def call(self, door: str, verb: str, args: dict, **control) -> dict:
        tool = to_tool_name(verb) if "." in verb else verb
        margs = dict(args) | {f"_{k}": v for k, v in control.items()}
        if door == "http":
            body = {"verb": verb, "args": args, **control}
            async with self.http.post(self.gw.url + "/api/v1/agent/dispatch", json=body,
                                      headers={"Authorization": f"Bearer {self.token}"}) as resp:  # fmt: skip
                return await resp.json()
        if door == "cli":
            argv = ["agent", "dispatch", verb, "--gateway", self.gw.url, "--args", json.dumps(args), "--json"]
            if control.get("confirm"):
                argv.append("--confirm")
            if control.get("typed_phrase"):
                argv += ["--phrase", control["typed_phrase"]]
            if control.get("nonce"):
                argv += ["--nonce", control["nonce"]]
            _, out, _ = await cli(*argv, env=_env(UCPGW_TOKEN=self.token))
            return json.loads(out)
        if door == "mcp_stdio":
            return (await self.stdio.call_tool(tool, margs)).structured_content
        if door == "webmcp":
            body = {"input": args, "surface": "dashboard", **control}
            headers = {"Cookie": f"{COOKIE_NAME}={self.cookie}", "X-CSRF-Token": self.csrf}
            async with self.http.post(self.gw.url + f"/api/v1/webmcp/execute/{tool}", json=body,
                                      headers=headers) as resp:  # fmt: skip
                return await resp.json()
        req = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": tool, "arguments": {**margs, "meta": META}}}  # fmt: skip
        async with self.http.post(self.gw.url + "/ucp/mcp", json=req,
                                  headers={"Authorization": f"Bearer {self.token}"}) as resp:  # fmt: skip
            return (await resp.json())["result"]["structuredContent"]


def _receipt_shape(env: dict) -> dict:
    """What must match across doors: everything but per-call ids and times."""
    volatile = {"audit_id", "idempotency_key", "timestamp", "rollback_handle"}
    out = {k: v for k, v in env.items() if k not in volatile}
    if isinstance(out.get("result"), dict):
        out["result"] = {k: v for k, v in out["result"].items() if k not in volatile}
    return out


async def _doors(gateway, stack: AsyncExitStack) -> dict[str, Doors]:
    # not a fixture: anyio (stdio client) must enter and exit its scopes in the test's own task
    return {r: await Doors(gateway, r, stack).start() for r in ("owner", "read_only")}


async def test_parity_across_doors(gateway):
    """One gateway, one set of doors per role: visibility, envelopes and receipts, denials, consent, caps."""
    async with AsyncExitStack() as stack:
        doors = await _doors(gateway, stack)
        await _visibility_equals_surfaces(gateway, doors)
        await _same_envelope_and_receipt_everywhere(gateway, doors)
        await _denials_consent_and_caps_are_the_same(gateway, doors)


async def _visibility_equals_surfaces(gateway, doors):
    every = listed(gateway.app[VERBS].registry)
    assert len(every) >= 10
    # the UCP shopping verbs run only through their binding (VerbPolicy.binding): on the ucp door they
    # are the binding's own tools (create_checkout ...), no generic verb tool that would only refuse
    bound = {v.name for v in every if v.policy.binding is not None}
    assert "checkout.create" in bound
    for door in DOORS:
        seen = await doors["owner"].visible(door)
        want = {v.name for v in every if door in v.record["surfaces"]} - bound
        assert seen == want, door
        assert "customer_delete" not in seen  # never a blocked name


async def _same_envelope_and_receipt_everywhere(gateway, doors):
    owner = doors["owner"]
    reads = [await owner.call(d, "customer.context", {"customer_id": "cust_1"}) for d in DOORS]
    assert all(r["ok"] for r in reads)
    shapes = {json.dumps(_receipt_shape(r), sort_keys=True) for r in reads}
    assert len(shapes) == 1, shapes
    await owner.call("http", "crm_contact_update", {"contact_id": 1, "notes": "parity"}, confirm=True)  # warm up
    writes = [await owner.call(d, "crm_contact_update", {"contact_id": 1, "notes": "parity"}, confirm=True)
              for d in DOORS]  # fmt: skip
    assert all(w["ok"] and isinstance(w["audit_id"], int) for w in writes), writes
    assert all(w["result"]["status"] == "completed" and w["result"]["audit_id"] == w["audit_id"] for w in writes)
    assert len({json.dumps(_receipt_shape(w), sort_keys=True) for w in writes}) == 1
    assert len({w["audit_id"] for w in writes}) == len(DOORS)  # five real executions, five audit rows


async def _denials_consent_and_caps_are_the_same(gateway, doors):
    owner, ro = doors["owner"], doors["read_only"]
    update = {"contact_id": 1, "status": "vip"}
    for door in DOORS:
        pend = await owner.call(door, "crm_contact_update", update)
        assert pend["ok"] is False and pend["error"]["reason"] == "dispatch_pending", (door, pend)
        denied = await ro.call(door, "crm_contact_update", update, confirm=True)
        assert denied["error"]["reason"] == "role_denied", (door, denied)
        blocked = await owner.call(door, "customer_delete", {"customer_id": "cust_1"})
        assert blocked["error"]["reason"] == "blocked_verb", (door, blocked)
    # a human-only verb (money movement): the same phrase and a pending approval on every door that
    # carries it; the staff token that asked cannot confirm it itself on any door, even with the
    # exact phrase (a person does, on the approval page: tests/browser/test_staff_pages.py)
    refund = {"order_id": "ord_1", "amount": 100, "currency": "USD"}
    phrases, approvals = set(), set()
    for door in ("http", "cli", "mcp_stdio", "webmcp"):
        pre = await owner.call(door, "payments.refund", refund)
        assert pre["error"]["reason"] == "dispatch_pending", (door, pre)
        assert pre["pending"]["confirm"] == "human" and "nonce" not in pre["pending"], (door, pre)
        phrases.add(pre["pending"]["required_phrase"])
        approvals.add(pre["pending"]["approval_id"])
        own = await owner.call(door, "payments.refund", refund, confirm=True,
                               typed_phrase=pre["pending"]["required_phrase"])  # fmt: skip
        assert own["error"]["reason"] == "consent_channel_required", (door, own)
        assert own["pending"]["approval_url"].endswith(pre["pending"]["approval_id"]), (door, own)
    assert len(phrases) == 1 and len(approvals) >= 1
    assert (await owner.call("ucp", "payments.refund", refund))["error"]["reason"] == "surface_not_allowed"
    # caps: a class disabled for the company is refused the same way everywhere
    async with tenant_tx(gateway.pool, gateway.company.id) as conn:
        await conn.execute("UPDATE companies SET settings = settings || '{\"verbs\": {\"daily_caps\": "
                           "{\"WRITE_REVERSIBLE\": 0}}}'::jsonb WHERE id = $1", gateway.company.id)  # fmt: skip
    for door in DOORS:
        capped = await owner.call(door, "crm_contact_update", update, confirm=True)
        assert capped["error"]["reason"] == "daily_cap_exceeded", (door, capped)


def test_split_control_round_trip():
    body = split_control("crm_contact_update", {"contact_id": 1, "_confirm": True, "_nonce": "n", "_x": 1})
    assert body == {"verb": "crm_contact_update", "confirm": True, "nonce": "n", "args": {"contact_id": 1}}

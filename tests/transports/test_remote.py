"""Remote transports as real processes: the CLI with --gateway and the MCP stdio bridge (official SDK
stdio client), both against a gateway on a real socket."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ucp_gateway.transports.remote import GatewayClient

CLI = str(Path(sys.executable).with_name("ucp-gateway"))


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCPGW_")}
    env.update(UCPGW_LOG_LEVEL="warning", **extra)
    return env


async def cli(*argv, env=None, stdin=None):
    proc = await asyncio.create_subprocess_exec(
        CLI, *argv, env=env or _env(), stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_cli_remote_list_and_dispatch(gateway):
    rc, out, err = await cli("verbs", "list", "--gateway", gateway.url, "--json", "--surface", "cli", "--shape",
                             "aggregate")  # fmt: skip
    assert rc == 0, err
    names = [r["name"] for r in json.loads(out)]
    assert "customer.context" in names and all(r["shape"] == "aggregate" for r in json.loads(out))

    env = _env(UCPGW_TOKEN=gateway.tokens["owner"])
    rc, out, err = await cli("agent", "dispatch", "customer.context", "--gateway", gateway.url, "--args",
                             '{"customer_id": "cust_1"}', "--json", env=env)  # fmt: skip
    assert rc == 0, err
    body = json.loads(out)
    assert body["ok"] and body["verb"] == "customer.context"

    rc, out, _ = await cli("customer-context", "cust_1", "--gateway", gateway.url, "--json", env=env)
    assert rc == 0 and json.loads(out)["result"] == body["result"]

    # a forged token comes back as an envelope, exit 1, no trace (role denials: test_parity)
    rc, out, err = await cli("customer-context", "cust_1", "--gateway", gateway.url, "--json",
                             env=_env(UCPGW_TOKEN="ucpgw_st_forged"))  # fmt: skip
    assert rc == 1 and json.loads(out)["error"]["reason"] == "auth_required" and "Traceback" not in err


async def test_cli_typed_phrase_round_trip(gateway):
    env = _env(UCPGW_TOKEN=gateway.tokens["owner"])
    refund = '{"order_id":"ord_1","amount":100,"currency":"USD"}'
    rc, out, _ = await cli("agent", "dispatch", "payments.refund", "--gateway", gateway.url, "--args", refund,
                           "--json", env=env)  # fmt: skip
    pending = json.loads(out)
    assert rc == 1 and pending["error"]["reason"] == "dispatch_pending"
    # money movement: a person confirms it on the approval page, never the token's own CLI
    assert pending["pending"]["confirm"] == "human" and "approval_url" in pending["pending"]
    phrase = pending["pending"]["required_phrase"]
    rc, out, err = await cli("agent", "dispatch", "payments.refund", "--gateway", gateway.url, "--args", refund,
                             "--confirm", "--phrase", phrase, "--json", env=env)  # fmt: skip
    assert rc == 1, out + err
    assert json.loads(out)["error"]["reason"] == "consent_channel_required"


def test_cli_needs_a_gateway_or_local_options(capsys, monkeypatch):
    from ucp_gateway.cli import main

    monkeypatch.delenv("UCPGW_GATEWAY", raising=False)
    assert main(["agent", "dispatch", "customer.context"]) == 1
    assert "--gateway" in capsys.readouterr().err
    assert main(["customer-context", "cust_1", "--gateway", "ftp://x"]) == 1
    assert "--gateway must be an http(s) base URL" in capsys.readouterr().err
    assert main(["customer-context", "cust_1", "--gateway", "http://shop.example"]) == 1
    assert "must use https" in capsys.readouterr().err


async def test_manifest_cache(gateway):
    t = [0.0]
    async with GatewayClient(gateway.url, surface="mcp_stdio", monotonic=lambda: t[0]) as gw:
        first = await gw.manifest()
        t[0] = 299.0
        assert await gw.manifest() == first and gw.manifest_fetches == 1
        t[0] = 301.0
        assert await gw.manifest() == first and gw.manifest_fetches == 2  # revalidated (ETag)
    async with GatewayClient(gateway.url, surface="") as gw:  # `verbs list --gateway` without --surface
        everything = {r["name"] for r in await gw.manifest()}
    assert {r["name"] for r in first} < everything


async def test_stdio_bridge_with_sdk_client(gateway):
    params = StdioServerParameters(command=CLI, args=["mcp", "--gateway", gateway.url],
                                   env=_env(UCPGW_TOKEN=gateway.tokens["owner"]))  # fmt: skip
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert "customer__context" in tools and "payments__refund" in tools
        assert all("." not in n for n in tools)
        res = await s.call_tool("customer__context", {"customer_id": "cust_1"})
        assert not res.is_error and res.structured_content["verb"] == "customer.context"
        assert json.loads(res.content[0].text) == res.structured_content
        res = await s.call_tool("crm_contact_update", {"contact_id": 1, "status": "vip"})
        assert res.is_error and res.structured_content["error"]["reason"] == "dispatch_pending"
        res = await s.call_tool("crm_contact_update", {"contact_id": 1, "status": "vip", "_confirm": True})
        env = res.structured_content
        assert not res.is_error and env["ok"] and env["result"]["status"] == "completed"
        assert isinstance(env["audit_id"], int) and env["idempotency_key"]


async def test_stdio_bridge_reads_without_key_writes_refused(gateway):
    params = StdioServerParameters(command=CLI, args=["mcp", "--gateway", gateway.url], env=_env())
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        assert "customer__context" in {t.name for t in (await s.list_tools()).tools}
        res = await s.call_tool("capability__manifest", {})
        assert not res.is_error and res.structured_content["ok"] is True
        res = await s.call_tool("inventory_adjust", {"product_id": "x", "delta": 1})
        assert res.structured_content["error"]["reason"] == "auth_required"
        res = await s.call_tool("customer__context", {"customer_id": "cust_1"})  # read, but not for anonymous
        assert res.structured_content["error"]["reason"] == "role_denied"


async def test_stdio_bridge_signs_with_the_agent_key(gateway, tmp_path):
    """Writes through the bridge authenticated only by an RFC 9421 signature with the agent key; the
    gateway verifies it against the key the agent's profile publishes, and the partner registry
    gives the agent its role."""
    from datetime import UTC, datetime

    from cryptography.hazmat.primitives.asymmetric import ec
    from joserfc.jwk import ECKey

    from tests.commerce.conftest import Platform
    from ucp_gateway.discovery.partners import add_partner

    gateway.clock.advance((datetime.now(UTC) - gateway.clock.now()).total_seconds())  # signatures use real time
    priv = ec.generate_private_key(ec.SECP256R1())
    jwk = {**ECKey.import_key(priv).as_dict(private=True), "kid": "bridge-1"}
    platform = Platform(signing_keys=[{k: v for k, v in jwk.items() if k != "d"}])
    await platform.start()
    try:
        profile = f"{platform.base}/profile/bridge.json"
        await add_partner(gateway.pool, gateway.company.id, profile_url=profile, role="employee",
                          http_hosts=frozenset({"127.0.0.1"}))  # fmt: skip
        key_file = tmp_path / "agent.jwk"
        key_file.write_text(json.dumps(jwk))
        key_file.chmod(0o600)
        env = _env(UCPGW_AGENT_KEY_FILE=str(key_file), UCPGW_AGENT_PROFILE=profile)
        params = StdioServerParameters(command=CLI, args=["mcp", "--gateway", gateway.url], env=env)
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            res = await s.call_tool("crm_contact_update", {"contact_id": 1, "status": "vip", "_confirm": True})
            assert res.structured_content["ok"] is True, res.structured_content
        # a key the profile does not publish is refused by the gateway's verifier
        other = {**ECKey.generate_key("P-256").as_dict(private=True), "kid": "bridge-1"}
        env = _env(UCPGW_AGENT_KEY=json.dumps(other), UCPGW_AGENT_PROFILE=profile)
        params = StdioServerParameters(command=CLI, args=["mcp", "--gateway", gateway.url], env=env)
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            res = await s.call_tool("crm_contact_update", {"contact_id": 1, "status": "lead", "_confirm": True})
            env_ = res.structured_content
            assert res.is_error and env_["ok"] is False and env_["error"]["reason"] not in ("", None)
    finally:
        await platform.runner.cleanup()

"""A real demo shop on a real socket, a real platform serving agent profiles, SDK-client helpers."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import httpx2
import pytest
from aiohttp import web
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.commerce.conftest import Platform
from ucp_gateway.app import create_app
from ucp_gateway.db import tenant_tx
from ucp_gateway.demo.seed import seed_demo
from ucp_gateway.verbs.auth import issue_staff_token

SHIPPING = {"methods": [{"type": "shipping", "destinations": [{
    "id": "home", "street_address": "1 Elm St", "address_locality": "Springfield", "postal_code": "62704",
    "address_country": "US"}], "selected_destination_id": "home"}]}  # fmt: skip
PAYMENT = {"payment": {"instruments": [{"id": "instr_1", "handler_id": "mock_payment_handler", "type": "card",
                                        "credential": {"type": "token", "token": "success_token"}}]}}  # fmt: skip


@dataclass
class Shop:
    base: str
    app: web.Application
    company: object
    platform: Platform
    pool: object
    admin: str  # an admin API token of the shop

    @property
    def profile(self) -> str:
        return self.platform.base + "/profile/a.json"

    async def set(self, sql: str, *args) -> None:
        async with tenant_tx(self.pool, self.company.id) as conn:
            await conn.execute(sql, self.company.id, *args)

    async def policy(self, policy: str) -> None:
        await self.set("UPDATE companies SET signature_policy = $2 WHERE id = $1", policy)


@pytest.fixture
async def shop(database, db_settings):
    platform = await Platform().start()
    company = (await seed_demo(database, db_settings)).company
    s = db_settings.model_copy(update={"webhook_worker": False, "dev_profile_hosts": ["127.0.0.1"],
                                       "public_scheme": "http", "host_cache_ttl": 0})  # fmt: skip
    app = create_app(s, database=database)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    admin = await issue_staff_token(database.pool, company.id, "admin", "admin-user")
    try:
        yield Shop(f"http://127.0.0.1:{port}", app, company, platform, database.pool, admin)
    finally:
        await runner.cleanup()
        await platform.runner.cleanup()


def meta(profile: str, key: str | None = None) -> dict:
    m: dict = {"ucp-agent": {"profile": profile}}
    if key:
        m["idempotency-key"] = key
    return m


@contextlib.asynccontextmanager
async def sdk_session(url: str, **client_kw):
    """The official MCP SDK client over a real socket (``client_kw`` to its httpx2 client)."""
    async with httpx2.AsyncClient(timeout=30, **client_kw) as http:
        async with streamable_http_client(url + "/ucp/mcp", http_client=http) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            yield s


async def ready_checkout(s: ClientSession, profile: str) -> dict:
    """Create a checkout through the SDK session and update it to ``ready_for_complete``."""
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    co = (await s.call_tool("create_checkout", {"meta": meta(profile), "checkout": create})).structured_content
    assert co["id"].startswith("chk_"), co
    upd = {**create, "fulfillment": SHIPPING}
    co = await s.call_tool("update_checkout", {"meta": meta(profile), "id": co["id"], "checkout": upd})
    co = co.structured_content
    group = co["fulfillment"]["methods"][0]["groups"][0]
    chosen = [{"id": group["id"], "selected_option_id": group["options"][0]["id"]}]
    upd["fulfillment"] = {"methods": [{**SHIPPING["methods"][0], "groups": chosen}]}
    co = await s.call_tool("update_checkout", {"meta": meta(profile), "id": co["id"], "checkout": upd})
    co = co.structured_content
    assert co["status"] == "ready_for_complete", co
    return co

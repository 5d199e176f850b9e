"""Fixtures: a flower shop company bound to 127.0.0.1, seeded with the demo catalogue, and an app."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime

import pytest
from aiohttp import web

from ucp_gateway.app import create_app
from ucp_gateway.clock import FrozenClock
from ucp_gateway.commerce.web import REST_PREFIX
from ucp_gateway.db import tenant_tx
from ucp_gateway.demo.seed import seed_demo
from ucp_gateway.keys import ensure_active_key

_AGENT = {"base": "http://127.0.0.1:9"}  # set by the ``platform`` fixture


def agent(name: str = "a") -> str:
    """Profile URL of test platform ``name`` (served by the ``platform`` fixture on 127.0.0.1)."""
    return f"{_AGENT['base']}/profile/{name}.json"


def headers(who: str | None = None, key: str | None = None) -> dict[str, str]:
    h = {"UCP-Agent": f'profile="{who or agent()}"', "Content-Type": "application/json"}
    if key:
        h["Idempotency-Key"] = key
    return h


def new_key() -> str:
    return str(uuid.uuid4())


def payload(item: str = "bouquet_roses", qty: int = 1, **extra) -> dict:
    return {"line_items": [{"item": {"id": item}, "quantity": qty}], **extra}


SHIP_US = {
    "methods": [
        {
            "type": "shipping",
            "destinations": [{"id": "d1", "address_country": "US", "postal_code": "62704"}],
            "selected_destination_id": "d1",
            "groups": [{"selected_option_id": "std-ship"}],
        }
    ]
}


def pay(token: str = "success_token", instr: str = "instr_1") -> dict:
    return {
        "payment": {
            "instruments": [
                {
                    "id": instr,
                    "handler_id": "mock_payment_handler",
                    "type": "card",
                    "credential": {"type": "token", "token": token},
                }
            ]
        }
    }


@pytest.fixture
async def company(database, db_settings):
    """The demo flower shop (main's demo seed), bound to 127.0.0.1 and localhost. Its signature
    policy is ``off`` (honoured only in development) so these tests can send unsigned requests;
    test_e2e_signed.py puts it back to ``required``."""
    c = (await seed_demo(database, db_settings)).company
    async with tenant_tx(database.pool, c.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'off' WHERE id = $1", c.id)
    return c


@pytest.fixture
def clock():
    return FrozenClock()


class Platform:
    """Real test platforms on 127.0.0.1: ``/profile/{name}.json`` (UCP platform profile with the
    checkout extensions and the order capability's webhook_url: ``webhook_url``, default this
    platform's ``/webhooks``; ``raw_document`` replaces the whole profile) and ``POST /webhooks``.
    ``profile_hits`` counts profile requests. ``version``: the protocol version its profile speaks
    (2026-08-25 lists its keys in ``keys``, 2026-04-08 in ``signing_keys``)."""

    def __init__(self, signing_keys: list | None = None, version: str = "2026-04-08"):
        self.version = version
        self.received: list[tuple[dict, bytes]] = []
        self.fail_next = 0
        self.hang = asyncio.Event()
        self.hanging = False
        self.inflight = 0
        self.signing_keys = signing_keys or []
        self.webhook_url: str | None = None
        self.raw_document: dict | None = None
        self.profile_hits = 0
        self.stream_forever = False  # answer 200 with a body that never ends

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/profile/{name}.json", self.profile)
        app.router.add_post("/webhooks", self.hook)

    async def start(self):
        app = web.Application()
        self.routes(app)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        return self

    def document(self) -> dict:
        v = self.version
        caps = {
            n: [
                {
                    "version": v,
                    "spec": f"https://ucp.dev/{v}/specification/{n.split('.')[-1]}",
                    "schema": f"https://ucp.dev/{v}/schemas/shopping/{n.split('.')[-1]}.json",
                }
            ]
            for n in (
                "dev.ucp.shopping.checkout",
                "dev.ucp.shopping.fulfillment",
                "dev.ucp.shopping.discount",
                "dev.ucp.shopping.buyer_consent",
                "dev.ucp.shopping.order",
                "dev.ucp.shopping.catalog.search",
                "dev.ucp.shopping.catalog.lookup",
                "dev.ucp.shopping.cart",
            )
        }
        for n in (
            "dev.ucp.shopping.fulfillment",
            "dev.ucp.shopping.discount",
            "dev.ucp.shopping.buyer_consent",
        ):
            caps[n][0]["extends"] = "dev.ucp.shopping.checkout"
        caps["dev.ucp.shopping.order"] = [
            {
                "version": v,
                "spec": f"https://ucp.dev/{v}/specification/order",
                "schema": f"https://ucp.dev/{v}/schemas/shopping/order.json",
                "config": {"webhook_url": self.webhook_url or self.base + "/webhooks"},
            }
        ]
        keys = "keys" if v == "2026-08-25" else "signing_keys"
        return {
            "ucp": {"version": v, "services": {}, "capabilities": caps, "payment_handlers": {}},
            keys: self.signing_keys,
        }

    async def profile(self, request):
        self.profile_hits += 1
        doc = self.raw_document if self.raw_document is not None else self.document()
        return web.json_response(doc, headers={"Cache-Control": "public, max-age=300"})

    async def hook(self, request):
        body = await request.read()
        if self.hanging:
            self.inflight += 1
            await self.hang.wait()
            return web.Response(status=499)  # the sender is gone; nothing counts as delivered
        if self.fail_next:
            self.fail_next -= 1
            return web.Response(status=503)
        self.received.append((dict(request.headers), body))
        if self.stream_forever:
            resp = web.StreamResponse(status=200)
            await resp.prepare(request)
            with contextlib.suppress(ConnectionError):
                while True:
                    await resp.write(b"x" * 65536)
                    await asyncio.sleep(0.01)
            return resp
        return web.json_response({"ucp": {"version": "2026-04-08", "status": "success"}})


@pytest.fixture
async def platform():
    p = await Platform().start()
    _AGENT["base"] = p.base
    yield p
    await p.runner.cleanup()


def make_app(database, settings, clock=None, **overrides) -> web.Application:
    """The real gateway app (create_app: middlewares + COMPONENTS) without the background worker;
    plain-http platform profiles allowed on 127.0.0.1 (development only); dev KEK ring in data_dir."""
    s = settings.model_copy(
        update={
            "webhook_worker": False,
            "dev_profile_hosts": ["127.0.0.1"],
            "keys_dir": settings.data_dir / "keys",
            **overrides,
        }
    )
    return create_app(s, clock=clock, database=database)


async def started(aiohttp_client, app, database, company):
    """Start ``app`` on a real socket and give the company its first signing key (complete
    responses are signed; signing fails closed without a key)."""
    client = await aiohttp_client(app)
    await ensure_active_key(database.pool, company.id, now=datetime.now(UTC))
    return client


@pytest.fixture
async def client(aiohttp_client, database, db_settings, company, platform):
    return await started(aiohttp_client, make_app(database, db_settings), database, company)


@pytest.fixture
async def frozen_client(aiohttp_client, database, db_settings, company, clock, platform):
    return await started(aiohttp_client, make_app(database, db_settings, clock), database, company)


def url(path: str) -> str:
    return REST_PREFIX + path

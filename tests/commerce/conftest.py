"""Fixtures: a flower shop company bound to 127.0.0.1, seeded with the demo catalogue, and an app."""

from __future__ import annotations

import uuid

import pytest
from aiohttp import web

from ucp_gateway.appkeys import CLOCK, DATABASE, SETTINGS
from ucp_gateway.clock import FrozenClock, SystemClock
from ucp_gateway.commerce.seed import import_catalog
from ucp_gateway.commerce.web import REST_PREFIX, setup
from ucp_gateway.db import tenant_tx
from ucp_gateway.tenancy import create_company

AGENT = "https://agent.example/profile.json"


def headers(agent: str = AGENT, key: str | None = None) -> dict[str, str]:
    h = {"UCP-Agent": f'profile="{agent}"', "Content-Type": "application/json"}
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
async def company(database):
    c = await create_company(
        database.pool, slug="flowers", display_name="Flower Shop", hostnames=["127.0.0.1"]
    )
    async with tenant_tx(database.pool, c.id) as conn:
        await import_catalog(conn, c.id)
    return c


@pytest.fixture
def clock():
    return FrozenClock()


def make_app(database, settings, clock=None) -> web.Application:
    app = web.Application()
    app[SETTINGS] = settings
    app[CLOCK] = clock or SystemClock()
    app[DATABASE] = database
    setup(app, worker=False)
    return app


@pytest.fixture
async def client(aiohttp_client, database, db_settings, company):
    return await aiohttp_client(make_app(database, db_settings))


@pytest.fixture
async def frozen_client(aiohttp_client, database, db_settings, company, clock):
    return await aiohttp_client(make_app(database, db_settings, clock))


def url(path: str) -> str:
    return REST_PREFIX + path

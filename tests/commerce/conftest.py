"""Fixtures: a flower shop company bound to 127.0.0.1, seeded with the demo catalogue, and an app."""

from __future__ import annotations

import uuid

import pytest
from aiohttp import web

from ucp_gateway.app import create_app
from ucp_gateway.clock import FrozenClock
from ucp_gateway.commerce.web import REST_PREFIX
from ucp_gateway.demo.seed import seed_demo

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
async def company(database, db_settings):
    """The demo flower shop (main's demo seed), bound to 127.0.0.1 and localhost."""
    return (await seed_demo(database, db_settings)).company


@pytest.fixture
def clock():
    return FrozenClock()


def make_app(database, settings, clock=None) -> web.Application:
    """The real gateway app (create_app: middlewares + COMPONENTS) without the background worker."""
    return create_app(settings.model_copy(update={"webhook_worker": False}), clock=clock, database=database)


@pytest.fixture
async def client(aiohttp_client, database, db_settings, company):
    return await aiohttp_client(make_app(database, db_settings))


@pytest.fixture
async def frozen_client(aiohttp_client, database, db_settings, company, clock):
    return await aiohttp_client(make_app(database, db_settings, clock))


def url(path: str) -> str:
    return REST_PREFIX + path

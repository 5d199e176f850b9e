"""Order webhooks: outbox -> signed delivery, retries with backoff, stable ids, crash safety, simulation."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import SecretStr

from ucp_gateway.commerce.webhooks import WebhookWorker, backoff, profile_target_resolver
from ucp_gateway.db import tenant_tx
from ucp_gateway.discovery import ProfileFetcher

from ..ucp_models import validate
from .conftest import SHIP_US, make_app, new_key, pay, payload, started, url
from .conftest import agent as conftest_agent
from .conftest import headers as hdrs
from .sigutil import sign_webhook, verify


@pytest.fixture
async def shop(aiohttp_client, database, db_settings, company, clock, platform):
    app = make_app(database, db_settings, clock, simulation_secret=SecretStr("s3cret-sim"))
    return await started(aiohttp_client, app, database, company)


@pytest.fixture
async def worker_factory(database, db_settings, clock):
    """Workers as the app builds them: guarded session, targets through a ProfileFetcher; the test
    platform's plain-http loopback host is on the dev allowlist, as for the app (make_app)."""
    settings = db_settings.model_copy(update={"dev_profile_hosts": ["127.0.0.1"]})
    fetcher = ProfileFetcher(settings, clock=clock)
    workers = []

    def make():
        w = WebhookWorker(
            database.pool, settings, clock, signer=sign_webhook, resolve_target=profile_target_resolver(fetcher)
        )
        workers.append(w)
        return w

    yield make
    for w in workers:
        await w.close()
    await fetcher.close()


async def _order(shop, platform) -> str:
    agent = conftest_agent()
    r = await shop.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=hdrs(agent, new_key()))
    cid = (await r.json())["id"]
    r = await shop.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=hdrs(agent, new_key()))
    return (await r.json())["order"]["id"]


def test_backoff_is_exponential_and_capped():
    assert [backoff(n, 2, 20) for n in range(1, 6)] == [2, 4, 8, 16, 20]


async def test_delivery_is_signed_retried_with_same_ids(shop, platform, worker_factory, clock, database, company):
    oid = await _order(shop, platform)
    w = worker_factory()
    platform.fail_next = 1
    assert await w.run_once() == 0  # 503 from the platform
    assert await w.run_once() == 0  # not due yet (backoff)
    clock.advance(2)
    assert await w.run_once() == 1
    assert await w.run_once() == 0  # delivered once
    ((h, body),) = platform.received
    verify("POST", platform.base + "/webhooks", h, body)
    order = json.loads(body)
    validate("order", order)
    assert order["id"] == oid and order["line_items"][0]["quantity"]["total"] == 1
    assert h["UCP-Agent"] == 'profile="https://127.0.0.1/.well-known/ucp"'
    async with tenant_tx(database.pool, company.id) as conn:
        row = await conn.fetchrow("SELECT * FROM webhook_outbox")
    assert h["Webhook-Id"] == str(row["id"]) and row["attempts"] == 2 and row["delivered_at"] is not None
    assert h["Webhook-Timestamp"] == str(int(row["created_at"].timestamp()))


async def test_a_receiver_streaming_without_end_is_delivered_by_its_status(shop, platform, worker_factory, db_settings):
    """Regression: the worker read the receiver's whole response body, so one that streamed without
    end was held until webhook_timeout, its 200 counted as a failure, and the body buffered."""
    await _order(shop, platform)
    platform.stream_forever = True
    w = worker_factory()
    t0 = asyncio.get_running_loop().time()
    assert await w.run_once() == 1
    assert asyncio.get_running_loop().time() - t0 < db_settings.webhook_timeout / 2
    assert len(platform.received) == 1


async def test_crash_between_commit_and_delivery_delivers_once(shop, platform, worker_factory, clock, db_settings):
    await _order(shop, platform)  # committed; no worker ran
    platform.hanging = True
    first = worker_factory()
    task = asyncio.create_task(first.run_once())
    for _ in range(250):
        await asyncio.sleep(0.02)
        if platform.inflight:
            break
    assert platform.inflight == 1
    task.cancel()  # the worker dies mid-delivery
    with pytest.raises(asyncio.CancelledError):
        await task
    platform.hanging = False
    platform.hang.set()
    second = worker_factory()
    assert await second.run_once() == 0  # leased by the dead worker
    clock.advance(db_settings.webhook_timeout * 3)
    assert await second.run_once() == 1
    clock.advance(3600)
    assert await second.run_once() == 0
    assert len(platform.received) == 1


async def test_simulate_shipping_needs_secret_and_emits_update(shop, platform, worker_factory):
    oid = await _order(shop, platform)
    r = await shop.post(f"/testing/simulate-shipping/{oid}")
    assert r.status == 403
    r = await shop.post(f"/testing/simulate-shipping/{oid}", headers={"Simulation-Secret": "wrong"})
    assert r.status == 403
    r = await shop.post(f"/testing/simulate-shipping/{oid}", headers={"Simulation-Secret": "s3cret-sim"})
    order = await r.json()
    assert r.status == 200 and order["fulfillment"]["events"][0]["type"] == "shipped"
    assert order["line_items"][0]["status"] == "fulfilled"
    w = worker_factory()
    assert await w.run_once() == 2
    ids = {h["Webhook-Id"] for h, _ in platform.received}
    bodies = [json.loads(b) for _, b in platform.received]
    assert len(ids) == 2 and sorted(len(b["fulfillment"]["events"]) for b in bodies) == [0, 1]
    r = await shop.get(url(f"/orders/{oid}"), headers=hdrs())
    assert (await r.json())["fulfillment"]["events"][0]["type"] == "shipped"


async def test_simulation_route_absent_without_secret(client):
    r = await client.post("/testing/simulate-shipping/x", headers={"Simulation-Secret": ""})
    assert r.status in (404, 405)

"""Webhook delivery that keeps up: concurrent within bounds, fair across receivers, fenced leases,
jittered backoff and a dead-letter state (real PostgreSQL, real local receivers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from ucp_gateway.clock import SystemClock
from ucp_gateway.commerce import webhook_queue as wq
from ucp_gateway.commerce.repo import insert_outbox
from ucp_gateway.commerce.webhooks import WebhookWorker
from ucp_gateway.db import tenant_tx

from ..faults.receivers import Receivers
from .sigutil import sign_webhook


@pytest.fixture
async def receivers():
    r = await Receivers().start()
    yield r
    await r.stop()


@pytest.fixture
def settings(db_settings):
    return db_settings.model_copy(
        update={"dev_profile_hosts": ["127.0.0.1"], "webhook_timeout": 3.0, "webhook_poll_interval": 0.2}
    )


async def _no_profile(url: str) -> str | None:
    raise AssertionError("every test event has its target")


def _worker(database, settings, clock=None, **kw) -> WebhookWorker:
    return WebhookWorker(
        database.pool, settings, clock or SystemClock(), signer=sign_webhook, resolve_target=_no_profile, **kw
    )


async def _events(database, company, receivers: Receivers, name: str, n: int, now=None) -> list[str]:
    """``n`` order events for receiver ``name`` (its caller profile and target URL), as the order's
    transaction writes them."""
    now = now or datetime.now(UTC)
    ids = []
    async with tenant_tx(database.pool, company.id) as conn:
        for i in range(n):
            eid = await insert_outbox(
                conn,
                company.id,
                order_id=f"ord_{name}_{i}",
                event_type="order.created",
                caller=f"https://{name}.platform.test/profile",
                payload={"id": f"ord_{name}_{i}"},
                target_url=receivers.url(name),
                now=now,
            )
            ids.append(str(eid))
    return ids


@contextlib.asynccontextmanager
async def _running(worker: WebhookWorker):
    task = asyncio.create_task(worker.run_forever())
    try:
        yield worker
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await worker.close()


async def _until(pred, timeout: float) -> float:
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, "timed out"
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


def test_retry_delay_is_jittered_exponential_backoff():
    assert [wq.retry_delay(n, 2, 20, lambda: 0.0) for n in range(1, 6)] == [1, 2, 4, 8, 10]
    assert [wq.retry_delay(n, 2, 20, lambda: 0.999999) for n in range(1, 6)] == pytest.approx([2, 4, 8, 16, 20])
    spread = {round(wq.retry_delay(3, 2, 3600), 6) for _ in range(50)}
    assert len(spread) > 40 and all(4 <= d <= 8 for d in spread)


async def test_a_dead_receiver_delays_only_itself(database, company, settings, receivers):
    receivers.behave["dead"] = "hang"
    await _events(database, company, receivers, "dead", 30)  # older than the live one's: first in line
    live = await _events(database, company, receivers, "live", 3)
    async with _running(_worker(database, settings)) as w:
        took = await _until(lambda: w.stats.delivered == 3, 10)
        assert receivers.inflight["dead"] == settings.webhook_receiver_concurrency  # it holds its own slots only
        assert took < 2.0, took  # sequential delivery waited out every dead attempt first
    assert sorted(receivers.ids("live")) == sorted(live)
    assert receivers.peak["dead"] == settings.webhook_receiver_concurrency and w.stats.delivered == 3


async def test_delivery_is_concurrent_within_its_bounds(database, company, settings, receivers):
    s = settings.model_copy(update={"webhook_concurrency": 8, "webhook_receiver_concurrency": 3})
    names = [f"r{i}" for i in range(5)]
    ids = []
    for name in names:
        receivers.behave[name] = 0.2
        ids += await _events(database, company, receivers, name, 6)
    async with _running(_worker(database, s)) as w:
        await _until(lambda: w.stats.delivered == len(ids), 30)
    assert sorted(i for _, i, _ in receivers.done) == sorted(ids)  # each once
    assert receivers.peak_total == 8 and max(receivers.peak.values()) == 3
    assert w.stats.delivered == len(ids) and w.stats.in_flight == 0
    assert (await wq.queue_stats(database.pool, now=datetime.now(UTC))).depth == 0


async def test_two_workers_with_a_slow_receiver_deliver_each_event_once(database, company, settings, receivers):
    """Regression: a 30 s lease against sequential batches of up to 200 s; a second process leased
    events the first was still sending (15 of 25 delivered twice with an 8 s receiver)."""
    s = settings.model_copy(update={"webhook_timeout": 2.0})
    receivers.behave["slow"] = 1.5  # most of an attempt's timeout
    ids = await _events(database, company, receivers, "slow", 25)
    async with _running(_worker(database, s)), _running(_worker(database, s)):
        await _until(lambda: len(receivers.done) == 25, 60)
        await asyncio.sleep(1.0)  # a duplicate would arrive about now
    assert sorted(receivers.ids("slow")) == sorted(ids) and len(receivers.received) == 25


async def test_a_late_worker_cannot_overwrite_a_taken_over_lease(database, company, receivers):
    (eid,) = await _events(database, company, receivers, "x", 1)
    t0 = datetime.now(UTC)
    first_until = t0 + timedelta(seconds=30)
    got = await wq.lease(database.pool, now=t0, until=first_until, limit=5, per_receiver=4, busy={})
    assert [str(e) for _, e, _ in got] == [eid]
    cid, event_id, _ = got[0]
    assert await wq.lease(database.pool, now=t0, until=first_until, limit=5, per_receiver=4, busy={}) == []
    later = t0 + timedelta(seconds=31)  # the first lease ran out: a second worker takes the event
    second_until = later + timedelta(seconds=30)
    assert len(await wq.lease(database.pool, now=later, until=second_until, limit=5, per_receiver=4, busy={})) == 1
    # the first worker, late: its renewal, retry and dead letter are refused by the fence
    assert not await wq.renew(database.pool, cid, event_id, first_until, later + timedelta(seconds=60))
    assert not await wq.reschedule(
        database.pool, cid, event_id, first_until, due=later, receiver="x", now=later, error="late"
    )
    assert not await wq.dead_letter(database.pool, cid, event_id, first_until, now=later, error="late")
    assert await wq.renew(database.pool, cid, event_id, second_until, later + timedelta(seconds=60))
    async with tenant_tx(database.pool, cid) as conn:
        row = await conn.fetchrow("SELECT attempts, last_error, dead_at FROM webhook_outbox WHERE id = $1", event_id)
    assert (row["attempts"], row["last_error"], row["dead_at"]) == (0, None, None)


async def test_a_receiver_at_its_bound_gets_no_more_leases(database, company, receivers):
    a, b = "https://a.platform.test/profile", "https://b.platform.test/profile"  # receiver = caller
    await _events(database, company, receivers, "a", 5)
    await _events(database, company, receivers, "b", 5)
    now = datetime.now(UTC)
    until = now + timedelta(seconds=30)
    got = await wq.lease(database.pool, now=now, until=until, limit=10, per_receiver=4, busy={a: 3, b: 4})
    assert [r for _, _, r in got] == [a]
    rr = await wq.lease(database.pool, now=now, until=until, limit=4, per_receiver=4, busy={})
    assert sorted(r for _, _, r in rr) == [a, a, b, b]  # round-robin across receivers (any order back)


async def test_spent_retry_budget_is_dead_lettered_listed_and_requeued(database, company, settings, receivers):
    from ucp_gateway.clock import FrozenClock

    clock = FrozenClock(datetime.now(UTC))
    s = settings.model_copy(update={"webhook_max_attempts": 2})
    receivers.behave["flaky"] = "fail"
    (eid,) = await _events(database, company, receivers, "flaky", 1, now=clock.now())
    w = _worker(database, s, clock, rand=lambda: 0.0)
    try:
        assert await w.run_once() == 0 and w.stats.retried == 1
        clock.advance(s.webhook_backoff_base / 2)  # the jittered delay's floor
        assert await w.run_once() == 0 and w.stats.dead == 1
        dead = await wq.dead_letters(database.pool, company.id)
        assert [str(d["id"]) for d in dead] == [eid]
        assert dead[0]["attempts"] == 2 and dead[0]["last_error"] == "HTTP 500"
        assert (await wq.queue_stats(database.pool, now=clock.now())).depth == 0
        clock.advance(3600)
        assert await w.run_once() == 0  # dead: not retried
        receivers.behave["flaky"] = "ok"
        assert await wq.requeue(database.pool, company.id, dead[0]["id"], now=clock.now())
        assert not await wq.requeue(database.pool, company.id, dead[0]["id"], now=clock.now())
        assert await w.run_once() == 1
        assert await wq.dead_letters(database.pool, company.id) == []
        assert receivers.ids("flaky") == [eid]
    finally:
        await w.close()


async def test_staff_see_and_requeue_dead_letters_from_the_cli(database, company, db_settings, receivers):
    from ..test_cli import run

    (eid,) = await _events(database, company, receivers, "gone", 1)
    async with tenant_tx(database.pool, company.id) as conn:
        held = await conn.fetchval("SELECT next_attempt_at FROM webhook_queue WHERE event_id = $1", uuid.UUID(eid))
    now = datetime.now(UTC)
    assert await wq.dead_letter(database.pool, company.id, uuid.UUID(eid), held, now=now, error="HTTP 410")
    env = {"DATABASE_URL": db_settings.database_url}
    status = await asyncio.to_thread(run, ["webhooks", "status", "--json"], env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["depth"] == 0
    dead = await asyncio.to_thread(run, ["webhooks", "dead", "--company", company.slug, "--json"], env)
    assert dead.returncode == 0, dead.stderr
    (row,) = json.loads(dead.stdout)["dead"]
    assert row["id"] == eid and row["last_error"] == "HTTP 410" and row["attempts"] == 1
    again = await asyncio.to_thread(run, ["webhooks", "retry", "--company", company.slug, eid], env)
    assert again.returncode == 0 and f"requeued {eid}" in again.stdout, again.stderr
    assert (await wq.queue_stats(database.pool, now=datetime.now(UTC))).depth == 1
    missing = await asyncio.to_thread(run, ["webhooks", "retry", "--company", company.slug, eid], env)
    assert missing.returncode != 0 and "no dead-lettered webhook" in missing.stderr

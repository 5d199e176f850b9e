"""Webhook delivery under faults, with real processes: ``serve --demo --workers 2`` delivering to
local receivers, one of which never answers and one of which is slow."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from .events import queue_events
from .procs import Gateway
from .receivers import Receivers


async def test_two_workers_deliver_each_webhook_once_and_a_dead_receiver_delays_only_itself(tmp_path):
    receivers = await Receivers().start()
    receivers.behave.update({"dead": "hang", "slow": 3.0})
    data_dir = (tmp_path / "gw").resolve()
    gw = Gateway(
        data_dir,
        tmp_path / "serve.log",
        args=("--demo", "--workers", "2"),
        env={
            "UCPGW_KEYS_DIR": str(tmp_path / "keys"),
            "UCPGW_DEV_PROFILE_HOSTS": '["127.0.0.1"]',
            "UCPGW_WEBHOOK_TIMEOUT": "5",  # a lease of 15 s against a 3 s receiver
            "UCPGW_WEBHOOK_POLL_INTERVAL": "0.2",
            "UCPGW_WEBHOOK_RECEIVER_CONCURRENCY": "4",
        },
    ).start()
    try:
        await asyncio.to_thread(gw.wait_listening, 120)
        dead = await queue_events(data_dir, [("dead", receivers.url("dead"))] * 20)
        slow = await queue_events(data_dir, [("slow", receivers.url("slow"))] * 25)
        t0 = time.monotonic()
        live = await queue_events(data_dir, [("live", receivers.url("live"))] * 3)
        while len(receivers.ids("live")) < 3:  # behind 20 events of a receiver that never answers
            assert time.monotonic() - t0 < 5, "a dead receiver held another receiver's webhooks"
            await asyncio.sleep(0.05)
        assert receivers.inflight["dead"] <= 8  # its own slots only (before any attempt timed out)
        deadline = time.monotonic() + 90
        while len(receivers.ids("slow")) < 25:
            assert time.monotonic() < deadline, f"{len(receivers.ids('slow'))} of 25 slow webhooks"
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # a duplicate sent by the other process would arrive by now
        got = Counter(i for n, i, _ in receivers.received if n == "slow")
        assert set(got) == set(slow) and max(got.values()) == 1, got.most_common(3)  # regression: 15 of 25 twice
        assert sorted(receivers.ids("live")) == sorted(live)
        assert receivers.peak["slow"] <= 8  # 4 per receiver in each of 2 processes
        assert {i for n, i, _ in receivers.received if n == "dead"} <= set(dead)
        assert await asyncio.to_thread(gw.stop) == 0
    finally:
        if gw.proc and gw.proc.poll() is None:
            gw.proc.kill()
        await receivers.stop()

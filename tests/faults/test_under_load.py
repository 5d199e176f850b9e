"""PostgreSQL killed mid-load, with real processes: the embedded server under ``serve --demo`` is
killed while signed buyer agents run checkout flows; its supervisor restarts it. While it is down
every answer is a 503 with Retry-After (no 500); the agents retry each step with its
Idempotency-Key; afterwards no order is lost or duplicated, and service is back within seconds."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import aiohttp
import asyncpg

from .events import owner_dsn
from .procs import Gateway, _free_port

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "checkout_flow.py"


def _bench():
    spec = importlib.util.spec_from_file_location("checkout_flow_bench_faults", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


async def test_postgres_killed_mid_load_is_only_503s_and_loses_no_order(tmp_path):
    bench = _bench()
    platform_port = _free_port()
    buyers = [bench.Buyer(i, f"http://127.0.0.1:{platform_port}") for i in range(4)]
    platform = await bench._platform(buyers, platform_port)
    data_dir = (tmp_path / "gw").resolve()
    gw = Gateway(
        data_dir,
        tmp_path / "serve.log",
        args=("--demo",),
        env={
            "UCPGW_KEYS_DIR": str(tmp_path / "keys"),
            "UCPGW_DEV_PROFILE_HOSTS": '["127.0.0.1"]',
            "UCPGW_PUBLIC_SCHEME": "http",
            "UCPGW_BUYER_RATE_LIMIT": "100000",
            "UCPGW_LOG_LEVEL": "warning",
        },
    ).start()
    statuses: Counter[int] = Counter()
    bad: list[str] = []
    orders: dict[str, str] = {}  # checkout id -> order id, as the complete answered
    stop = asyncio.Event()
    base, authority = f"http://127.0.0.1:{gw.port}", f"127.0.0.1:{gw.port}"

    async def call(session, b, method: str, path: str, body: bytes) -> dict:
        key = str(uuid.uuid4())  # one key per step: its retries are the same operation
        for _ in range(600):
            h = b.headers(method, authority, path, body, key, True)
            try:
                async with session.request(method, base + path, data=body, headers=h) as r:
                    data = await r.read()
                    statuses[r.status] += 1
                    if r.status == 503:
                        if "Retry-After" not in r.headers or "code" not in json.loads(data):
                            bad.append(f"{method} {path}: 503 without Retry-After or JSON: {data[:200]!r}")
                        await asyncio.sleep(0.1)
                        continue
                    if r.status >= 300:
                        bad.append(f"{method} {path} -> {r.status} {data[:300]!r}")
                        raise RuntimeError(bad[-1])
                    return json.loads(data)
            except aiohttp.ClientConnectionError:  # the gateway never drops a connection: count it
                statuses[0] += 1
                await asyncio.sleep(0.1)
        raise AssertionError(f"{method} {path}: no answer but 503 for a minute")

    async def agent(b) -> None:
        create, update, pay = b.bodies
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                co = await call(session, b, "POST", "/ucp/v1/checkout-sessions", create)
                await call(session, b, "PUT", f"/ucp/v1/checkout-sessions/{co['id']}", update)
                done = await call(session, b, "POST", f"/ucp/v1/checkout-sessions/{co['id']}/complete", pay)
                assert done["status"] == "completed", done
                orders[co["id"]] = done["order"]["id"]

    try:
        await asyncio.to_thread(gw.wait_listening, 120)
        owner = await asyncpg.connect(owner_dsn(data_dir))
        try:
            await owner.execute("UPDATE inventory SET quantity = 1000000")
        finally:
            await owner.close()
        agents = [asyncio.create_task(agent(b)) for b in buyers]
        try:
            while len(orders) < 8:
                await asyncio.sleep(0.05)
                assert not any(a.done() for a in agents), [a.exception() for a in agents if a.done()]
            os.kill(gw.postmaster_pid(), signal.SIGKILL)  # mid-load
            killed, before = time.monotonic(), len(orders)
            while statuses[503] == 0:
                await asyncio.sleep(0.02)
            while len(orders) < before + 8:  # served again, without a restart of the gateway
                assert time.monotonic() - killed < 60, "not back within a minute"
                await asyncio.sleep(0.05)
                assert not any(a.done() for a in agents), [a.exception() for a in agents if a.done()]
            back = time.monotonic() - killed
        finally:
            stop.set()
            await asyncio.gather(*agents, return_exceptions=True)
        assert not bad, bad[:5]
        assert set(statuses) <= {200, 201, 503}, statuses  # no 500, no dropped connection
        owner = await asyncpg.connect(owner_dsn(data_dir))
        try:
            rows = await owner.fetch("SELECT checkout_id, id FROM orders")
        finally:
            await owner.close()
        stored = {r["checkout_id"]: r["id"] for r in rows}
        assert len(rows) == len(stored)  # one order per checkout: none duplicated by a retry
        assert {c: stored.get(c) for c in orders} == orders  # every completed checkout's order is there
        assert back < 30, back
        events = [e.get("event") for e in gw.events()]  # warnings and errors: one line per change
        assert events.count("embedded_postgres_died") == 1 and events.count("database_unavailable") == 1, events
        assert not [e for e in gw.events() if e.get("level") == "error" and e.get("event") != "embedded_postgres_died"]
        assert "Traceback" not in gw.log.read_text()
        assert await asyncio.to_thread(gw.stop) == 0
    finally:
        if gw.proc and gw.proc.poll() is None:
            gw.proc.kill()
        await platform.cleanup()

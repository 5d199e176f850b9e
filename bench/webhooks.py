"""Order-webhook delivery benchmark: deliveries per second and what a dead receiver costs the others.

One gateway (``ucp-gateway serve --demo --workers N``, default the usable cores, on its own embedded
PostgreSQL in a temporary directory; production settings apart from http targets on 127.0.0.1)
delivers order events to receivers served by this process on 127.0.0.1 (one aiohttp server, a path
per receiver). Events are written into the gateway's database as an order's own transaction writes
them (``commerce.repo.insert_outbox``: outbox row + queue row), so what is measured is delivery
alone: lease, read, sign (the company's real key, RFC 9421), POST, record.

Runs, each after the queue is empty again:

  burst-1:    ``--events`` events for 1 receiver, all queued at once: deliveries/s until the queue
              is empty (the per-receiver bound, 4 in flight per process, is what limits it).
  burst-100:  ``--events`` events over 100 receivers of which 10 answer after ``--slow`` seconds
              and 1 never answers (its attempts time out): deliveries/s of the live receivers.
  paced:      ``--rate`` events/s for ``--seconds`` over 100 fast receivers, without and then with
              one dead receiver taking 1 event in 10: the fast receivers' delivery latency (queued
              -> answered), p50 / p99, and what the dead one added.

Each burst also prints the CPU it cost per delivery: the gateway's processes (supervisor and
workers) and PostgreSQL's (postmaster and backends; the bench's inserts of the events included),
the figure that decides how many deliveries a quiet machine's cores can make (checkout_flow.py
prints the same per order).

Printed next to the order rate ``bench/checkout_flow.py`` reaches, measured first in the same
invocation (its signed saturation run, ``--order-seconds`` long, with as many gateway processes;
nothing else of this bench runs meanwhile), or given with ``--order-rate``: delivery keeps up
when deliveries/s >= orders/s. Shared machine: figures swing; compare the runs of one invocation.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from aiohttp import web

from ucp_gateway.commerce.repo import insert_outbox

_CHECKOUT_FLOW = Path(__file__).resolve().with_name("checkout_flow.py")
_spec = importlib.util.spec_from_file_location("checkout_flow_bench", _CHECKOUT_FLOW)
cf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cf)  # bench/ is no package: the checkout bench's CPU accounting


def measure_order_rate(seconds: float, workers: int) -> float:
    """Signed checkout flows/s (one order each) at saturation, from one short run of
    ``bench/checkout_flow.py --modes signed --rounds 1`` (its own gateway and database)."""
    cmd = [sys.executable, str(_CHECKOUT_FLOW), "--modes", "signed", "--rounds", "1"]
    cmd += ["--seconds", str(seconds), "--warmup", "1", "--workers", str(workers)]
    print("measuring the order rate:", " ".join(["python", "bench/checkout_flow.py", *cmd[2:]]), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rate = parse_order_rate(out)
    row = next(line for line in out.splitlines() if f"{rate:6.1f} flows/s" in line)
    print(f"  its saturation row: {' '.join(row.split())}")  # with its CPU ms per order
    return rate


def parse_order_rate(output: str) -> float:
    """The signed saturation figure (flows/s) of checkout_flow.py's printout. Raises ValueError."""
    lines = output.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("(a) saturation"))
        row = next(line for line in lines[start + 1 :] if line.strip().startswith("signed + audited"))
    except StopIteration:
        raise ValueError(f"no signed saturation figure in: {output[-500:]!r}") from None
    return float(row.split("flows/s")[0].split()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receivers:
    """``POST /{name}``: 200 at once, after ``slow[name]`` seconds, or never (``dead``)."""

    def __init__(self) -> None:
        self.slow: dict[str, float] = {}
        self.dead: set[str] = set()
        self.arrived: dict[str, float] = {}  # Webhook-Id -> monotonic time answered 200
        self._never = asyncio.Event()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{name}", self.hook)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.2)
        await self.runner.setup()
        self.port = _free_port()
        await web.TCPSite(self.runner, "127.0.0.1", self.port, backlog=1024).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    async def hook(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        await request.read()
        if name in self.dead:
            await self._never.wait()
        if name in self.slow:
            await asyncio.sleep(self.slow[name])
        self.arrived.setdefault(request.headers.get("Webhook-Id", ""), time.monotonic())
        return web.Response(status=200)

    async def stop(self) -> None:
        self._never.set()
        await self.runner.cleanup()


class Gateway:
    def __init__(self, tmp: Path, workers: int, timeout: float) -> None:
        self.tmp, self.port = tmp, _free_port()
        self.data_dir = tmp / "gw"
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
        env.update(
            UCPGW_ENVIRONMENT="development",
            UCPGW_PUBLIC_SCHEME="http",
            UCPGW_DEV_PROFILE_HOSTS='["127.0.0.1"]',
            UCPGW_KEYS_DIR=str(tmp / "keys"),
            UCPGW_LOG_LEVEL="error",
            UCPGW_WEBHOOK_TIMEOUT=str(timeout),
            UCPGW_VERBS_VALIDATE_OUTPUT="false",
        )
        cmd = [sys.executable, "-m", "ucp_gateway.cli", "serve", "--demo", "--workers", str(workers)]
        cmd += ["--data-dir", str(self.data_dir), "--port", str(self.port)]
        self.log = (tmp / "serve.log").open("w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        self.dsn = f"postgresql://postgres:@/ucp_gateway?host={self.data_dir / 'pg'}"

    def wait_ready(self) -> None:
        for _ in range(1800):
            if self.proc.poll() is not None:
                raise SystemExit(f"gateway exited: {(self.tmp / 'serve.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("gateway not ready")

    def cpu_pids(self) -> list[int]:
        """The gateway's supervisor (its workers are children) and the embedded postmaster (its
        backends are children; pg_ctl detached it from the gateway)."""
        postmaster = int((self.data_dir / "pg" / "postmaster.pid").read_text().split()[0])
        return [self.proc.pid, postmaster]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def _queue(conn, company_id, targets: list[tuple[str, str]], sent: dict[str, float]) -> list[str]:
    """Queue one event per ``(receiver, url)`` in one transaction; ``sent[id]`` = when committed.
    Returns the Webhook-Ids, in the order of ``targets``."""
    now = datetime.now(UTC)
    ids = []
    async with conn.transaction():
        await conn.execute("SELECT set_config('app.company_id', $1, true)", str(company_id))
        for name, url in targets:
            eid = await insert_outbox(
                conn,
                company_id,
                order_id=f"ord_{name}",
                event_type="order.created",
                caller=f"https://{name}.platform.test/profile",
                payload={"id": f"ord_{name}", "status": "processing"},
                target_url=url,
                now=now,
            )
            ids.append(str(eid))
    t = time.monotonic()
    for i in ids:
        sent[i] = t
    return ids


async def _drained(conn, receivers: Receivers, wanted: set[str], limit: float) -> float:
    t0 = time.monotonic()
    while not wanted <= receivers.arrived.keys():
        if time.monotonic() - t0 > limit:
            print(f"  (gave up after {limit:.0f} s: {len(wanted - receivers.arrived.keys())} undelivered)")
            break
        await asyncio.sleep(0.02)
    return max((receivers.arrived.get(i, time.monotonic()) for i in wanted), default=t0)


async def _clear(conn) -> None:
    await conn.execute("DELETE FROM webhook_queue")


async def burst(
    conn, company_id, receivers: Receivers, names: list[str], events: int, live: set[str], pids: list[int]
) -> tuple[float, float, float]:
    """``(deliveries/s to the live receivers, gateway CPU ms, PostgreSQL CPU ms)`` per delivery made
    (the CPU from the first event queued until the live receivers have all of theirs)."""
    sent: dict[str, float] = {}
    targets = [(names[i % len(names)], receivers.url(names[i % len(names)])) for i in range(events)]
    ids: list[str] = []
    before = [cf._cpu_times([pid]) for pid in pids]
    for k in range(0, events, 500):
        ids += await _queue(conn, company_id, targets[k : k + 500], sent)
    t0 = min(sent.values())
    mine = [i for i, (n, _) in zip(ids, targets, strict=True) if n in live]
    end = await _drained(conn, receivers, set(mine), 300)
    gw_cpu, pg_cpu = (cf.cpu_delta(b, cf._cpu_times([pid])) for b, pid in zip(before, pids, strict=True))
    await _clear(conn)
    made = max(1, len(receivers.arrived.keys() & set(ids)))
    return len(mine) / max(1e-9, end - t0), 1000 * gw_cpu / made, 1000 * pg_cpu / made


async def paced(conn, company_id, receivers, names, rate: float, seconds: float, dead: str | None) -> list[float]:
    """Latencies (ms) of the fast receivers' events at ``rate`` events/s; ``dead`` takes 1 in 10."""
    sent: dict[str, float] = {}
    fast: list[str] = []
    n, step, t0 = 0, 0.05, time.monotonic()
    while time.monotonic() - t0 < seconds:
        due = int((time.monotonic() - t0) * rate) - n
        batch = []
        for _ in range(max(0, due)):
            name = dead if dead is not None and n % 10 == 9 else names[n % len(names)]
            batch.append((name, receivers.url(name)))
            n += 1
        if batch:
            ids = await _queue(conn, company_id, batch, sent)
            fast += [i for i, (nm, _) in zip(ids, batch, strict=True) if nm != dead]
        await asyncio.sleep(step)
    await _drained(conn, receivers, set(fast), 120)
    await _clear(conn)
    return [(receivers.arrived[i] - sent[i]) * 1000 for i in fast if i in receivers.arrived]


def _pct(xs: list[float], p: float) -> float:
    return statistics.quantiles(xs, n=100)[p - 1] if len(xs) >= 2 else (xs[0] if xs else float("nan"))


async def main() -> None:
    from ucp_gateway.config import usable_cores

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=usable_cores())
    ap.add_argument("--events", type=int, default=2000, help="events per burst run")
    ap.add_argument("--rate", type=float, default=100.0, help="events/s of the paced runs")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each paced run")
    ap.add_argument("--slow", type=float, default=0.5, help="answer delay of the slow receivers, s")
    ap.add_argument("--timeout", type=float, default=5.0, help="UCPGW_WEBHOOK_TIMEOUT (a dead receiver's attempt)")
    ap.add_argument("--order-rate", type=float, help="orders/s to compare with (default: measured first)")
    ap.add_argument("--order-seconds", type=float, default=5.0, help="length of the order-rate measurement, s")
    args = ap.parse_args()
    if args.order_rate is None:
        args.order_rate = await asyncio.to_thread(measure_order_rate, args.order_seconds, args.workers)
        source = f"measured just now, signed saturation, {args.workers} gateway processes"
    else:
        source = "given"

    tmp = Path(tempfile.mkdtemp(prefix="ucpgw-bench-webhooks-"))
    receivers = Receivers()
    await receivers.start()
    gw = Gateway(tmp, args.workers, args.timeout)
    try:
        await asyncio.to_thread(gw.wait_ready)
        conn = await asyncpg.connect(gw.dsn)
        company_id = await conn.fetchval("SELECT id FROM companies WHERE slug = 'flower-shop'")
        print(f"gateway: serve --workers {args.workers}; webhook_timeout {args.timeout} s; shared machine")
        print(f"order rate to keep up with: {args.order_rate:.1f} orders/s (bench/checkout_flow.py, {source})")

        pids = gw.cpu_pids()
        rate1, gw1, pg1 = await burst(conn, company_id, receivers, ["one"], args.events, {"one"}, pids)
        print(
            f"burst-1:   {args.events} events, 1 receiver: {rate1:.1f} deliveries/s"
            f" (cpu ms/delivery: gateway {gw1:.1f}, postgres {pg1:.1f})"
        )

        names = [f"r{i:03d}" for i in range(100)]
        receivers.slow.update({n: args.slow for n in names[:10]})
        receivers.dead.add(names[10])
        live = set(names) - {names[10]}
        rate100, gw100, pg100 = await burst(conn, company_id, receivers, names, args.events, live, pids)
        print(
            f"burst-100: {args.events} events, 100 receivers (10 answer after {args.slow} s, 1 never):"
            f" {rate100:.1f} deliveries/s to the live ones (cpu ms/delivery: gateway {gw100:.1f},"
            f" postgres {pg100:.1f})"
        )
        receivers.slow.clear()
        fast = [f"f{i:03d}" for i in range(100)]
        base = await paced(conn, company_id, receivers, fast, args.rate, args.seconds, None)
        receivers.dead.add("deadone")
        with_dead = await paced(conn, company_id, receivers, fast, args.rate, args.seconds, "deadone")
        for label, xs in (("no dead receiver", base), ("1 dead receiver (1 event in 10)", with_dead)):
            print(
                f"paced {args.rate:.0f}/s x {args.seconds:.0f} s, 100 fast receivers, {label}:"
                f" p50 {_pct(xs, 50):.0f} ms, p99 {_pct(xs, 99):.0f} ms, max {max(xs):.0f} ms ({len(xs)} events)"
            )
        print(
            f"a dead receiver added p50 {_pct(with_dead, 50) - _pct(base, 50):+.0f} ms,"
            f" p99 {_pct(with_dead, 99) - _pct(base, 99):+.0f} ms to the others' delivery"
        )
        keeps = "keeps up" if min(rate1, rate100) >= args.order_rate else "does NOT keep up"
        print(f"delivery {keeps} with {args.order_rate:.1f} orders/s (slowest burst {min(rate1, rate100):.1f}/s)")
        await conn.close()
    finally:
        gw.stop()
        await receivers.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

"""Tenants benchmark: what 1, 1,000 and 10,000 companies on one platform cost, side by side.

The companies are created the honest way, by ``ucp-gateway companies import FILE`` (a CSV of slug
and host, each company with its first signing key), on one embedded PostgreSQL that grows from
one count to the next; the first company is the flower-shop demo (its catalogue takes the signed
checkouts). For each count a gateway is started (``ucp-gateway serve``, one process, production
settings apart from http profile URLs as in bench/checkout_flow.py, the key scheduler and the
retention sweeper every ``--interval`` seconds, 12 and 120 times their default rates) and measured:

- start-up: from spawning ``serve`` to the first 200 from ``/readyz``;
- background CPU with no traffic: the gateway's and PostgreSQL's CPU over ``--idle`` seconds, as %
  of one core, at the shortened interval (at the default intervals it is a twelfth or less); the
  database is vacuumed and analysed after each import first, as autovacuum soon would;
- ``/.well-known/ucp``: the cold first pass over every host (each host's lookup and first render,
  req/s over 16 connections), a second pass (warm), then ``--rounds`` interleaved pairs of runs of
  ``--seconds`` over ``--connections`` keep-alive connections: all on one company's host, then each
  request on a random one of all the hosts; req/s, p50 and p99 over the rounds of each kind, and
  spread / one (targets: req/s >= 1 / 1.2 of one, p99 <= 1.2 times one's);
- signed checkout flows (create -> update -> complete, RFC 9421 signed, audited) by ``--buyers``
  buyer agents for ``--seconds`` each while the background jobs run: closed loop (flows/s), then
  paced at ``--flow-rate`` flows/s (request p99; its ratio to the smallest count's p99, target
  <= 1.2: a closed loop's p99 is its queue, not the flow's cost);
- the gateway's RSS after the runs, and the time to walk the whole agent graph
  (``/ucp/agent-graph`` pages followed by their ``next`` links, first walk and second walk).

The load generator shares the machine (it runs in this process): on a shared machine, compare the
columns of one run, not figures of different runs.

Usage: python bench/tenants.py [--counts 1,1000,10000] [--seconds 4] [--idle 15] [--interval 5]
       [--connections 32] [--buyers 8] [--rounds 3] [--flow-rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import importlib.util
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CF_PATH = Path(__file__).resolve().parent / "checkout_flow.py"
_spec = importlib.util.spec_from_file_location("checkout_flow_bench", _CF_PATH)
cf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cf)  # bench/ is no package: the checkout bench's buyers, client and helpers

CLI = [sys.executable, "-m", "ucp_gateway.cli"]


def _host(i: int) -> str:
    return f"t{i:05d}.bench.test"


def _import(env: dict, tmp: Path, start: int, stop: int) -> float:
    """Companies ``start..stop-1`` through ``companies import`` (a subprocess); returns its seconds."""
    if stop <= start:
        return 0.0
    path = tmp / f"companies-{start}-{stop}.csv"
    path.write_text(
        "slug,name,hosts,tier\n" + "".join(f"t{i:05d},Tenant {i},{_host(i)},starter\n" for i in range(start, stop))
    )
    t0 = time.perf_counter()
    p = subprocess.run([*CLI, "companies", "import", str(path), "--json"], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"import failed: {p.stderr.strip()}")
    return time.perf_counter() - t0


async def _get(port: int, host: str, path: str) -> tuple[int, bytes]:
    c = cf.Connection(port, host)
    try:
        return await c.request("GET", path, {}, b"")
    finally:
        c.close()


async def _start(env: dict, port: int) -> tuple[subprocess.Popen, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env)
    while time.perf_counter() - t0 < 120:
        if proc.poll() is not None:
            raise SystemExit("gateway exited at start")
        try:
            status, _ = await _get(port, "127.0.0.1", "/readyz")
            if status == 200:
                return proc, time.perf_counter() - t0
        except OSError:
            pass
        await asyncio.sleep(0.02)
    proc.kill()
    raise SystemExit("gateway did not become ready")


async def _discovery(port: int, hosts: list[str], seconds: float, connections: int) -> dict:
    """GET /.well-known/ucp on random ``hosts`` over keep-alive connections: requests, wall seconds,
    latencies (s) and errors."""
    lat: list[float] = []
    stop = time.perf_counter() + seconds
    errors = 0

    async def worker() -> None:
        nonlocal errors
        c = cf.Connection(port, hosts[0])
        while time.perf_counter() < stop:
            c.authority = random.choice(hosts)
            t0 = time.perf_counter()
            status, _ = await c.request("GET", "/.well-known/ucp", {}, b"")
            lat.append(time.perf_counter() - t0)
            errors += status != 200
        c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return {"wall": time.perf_counter() - t0, "lat": lat, "errors": errors}


def _figures(runs: list[dict]) -> dict:
    """req/s, p50 and p99 (ms) over ``runs`` of :func:`_discovery` together, and their errors."""
    lat = [x for r in runs for x in r["lat"]]
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [0.0] * 99
    wall = sum(r["wall"] for r in runs)
    return {"rps": len(lat) / wall, "p50": q[49] * 1e3, "p99": q[98] * 1e3, "errors": sum(r["errors"] for r in runs)}


async def _warm(port: int, hosts: list[str], connections: int = 16) -> float:
    """One request per host, spread over ``connections``; returns the pass's req/s (the first
    pass: every host's lookup and first render)."""
    queue = list(hosts)

    async def worker() -> None:
        c = cf.Connection(port, hosts[0])
        while queue:
            c.authority = queue.pop()
            await c.request("GET", "/.well-known/ucp", {}, b"")
        c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return len(hosts) / (time.perf_counter() - t0)


async def _flows(port: int, buyers: list, seconds: float, rate: float | None = None) -> dict:
    """Signed create -> update -> complete flows for ``seconds`` (closed loop, or paced at ``rate``
    flows/s): flows/s and the per-request p99 (ms)."""
    run = await cf._load(port, buyers, True, seconds, 1.0, rate=rate)
    q = statistics.quantiles(run["lat"], n=100) if len(run["lat"]) > 1 else [0.0] * 99
    return {"fps": run["flows"] / seconds, "p99": q[98] * 1e3, "errors": run["errors"]}


async def _walk(port: int) -> tuple[float, int]:
    """Seconds to read every agent-graph page (following ``next``) and the companies listed."""
    c = cf.Connection(port, "platform.localhost")
    path, n, t0 = "/ucp/agent-graph", 0, time.perf_counter()
    try:
        while path:
            status, body = await c.request("GET", path, {}, b"")
            if status != 200:
                raise SystemExit(f"agent graph page {path} -> {status}")
            page = json.loads(body)
            n += len(page["companies"])
            nxt = page.get("next")
            path = nxt[nxt.index("/ucp/agent-graph") :] if nxt else None
    finally:
        c.close()
    return time.perf_counter() - t0, n


def _rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


async def _vacuum(dsn: str) -> None:
    """VACUUM (ANALYZE) after an import, as autovacuum would soon: the idle window then measures the
    background jobs, not the new rows' first vacuum."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()


async def _measure(n: int, env: dict, args, buyers: list, pg_pid: int, import_s: float) -> dict:
    port = cf._free_port()
    proc, startup = await _start(env, port)
    try:
        await asyncio.sleep(2.0)  # the first rounds start after 50-100 % of the interval
        before, t0 = cf._cpu_times([proc.pid, pg_pid]), time.perf_counter()
        await asyncio.sleep(args.idle)
        idle_cpu = cf.cpu_delta(before, cf._cpu_times([proc.pid, pg_pid])) / (time.perf_counter() - t0)
        one = ["localhost"]  # the demo company's host, at every count
        hosts = one + [_host(i) for i in range(1, n)]
        cold = await _warm(port, hosts)  # every host's first request: its lookup and first render
        await _warm(port, hosts)  # warm: the hosts the cold pass left behind are revalidated
        singles, spreads = [], []
        for _ in range(args.rounds):  # interleaved, so that both see the same machine
            singles.append(await _discovery(port, one, args.seconds, args.connections))
            spreads.append(await _discovery(port, hosts, args.seconds, args.connections))
        flows = await _flows(port, buyers, args.seconds)
        paced = await _flows(port, buyers, args.seconds, args.flow_rate)
        walk1, listed = await _walk(port)
        walk2, _ = await _walk(port)
        rss = _rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    return {
        "companies": n,
        "import_s": import_s,
        "startup_s": startup,
        "idle_cpu_pct": idle_cpu * 100,
        "cold_rps": cold,
        "one": _figures(singles),
        "spread": _figures(spreads),
        "flows": flows,
        "paced": paced,
        "rss_mb": rss,
        "walk_ms": (walk1 * 1e3, walk2 * 1e3),
        "listed": listed,
    }


def _table(results: list[dict], args) -> str:
    base = results[0]  # the smallest count: "one company" for the flow ratios
    rows = [
        ("companies", lambda r: f"{r['companies']:,}"),
        ("import (s, for the ones added)", lambda r: f"{r['import_s']:.1f}"),
        ("start-up to /readyz (s)", lambda r: f"{r['startup_s']:.2f}"),
        (f"idle CPU, % of a core (rounds every {args.interval:g} s)", lambda r: f"{r['idle_cpu_pct']:.2f}"),
        ("discovery, cold first pass over all: req/s", lambda r: f"{r['cold_rps']:,.0f}"),
        ("discovery, one company: req/s", lambda r: f"{r['one']['rps']:,.0f}"),
        ("  p50 / p99 (ms)", lambda r: f"{r['one']['p50']:.1f} / {r['one']['p99']:.1f}"),
        ("discovery, spread over all (warm): req/s", lambda r: f"{r['spread']['rps']:,.0f}"),
        ("  p50 / p99 (ms)", lambda r: f"{r['spread']['p50']:.1f} / {r['spread']['p99']:.1f}"),
        ("  spread / one: req/s (target >= 0.83)", lambda r: f"{r['spread']['rps'] / r['one']['rps']:.2f}"),
        ("  spread / one: p99 (target <= 1.2)", lambda r: f"{r['spread']['p99'] / r['one']['p99']:.2f}"),
        ("signed flows/s, closed loop (jobs running)", lambda r: f"{r['flows']['fps']:.1f}"),
        ("  request p99 (ms)", lambda r: f"{r['flows']['p99']:.1f}"),
        (f"signed flows paced at {args.flow_rate:g}/s: flows/s", lambda r: f"{r['paced']['fps']:.1f}"),
        ("  request p99 (ms)", lambda r: f"{r['paced']['p99']:.1f}"),
        (
            f"  p99 / {base['companies']:,}'s (target <= 1.2)",
            lambda r: f"{r['paced']['p99'] / base['paced']['p99']:.2f}",
        ),
        ("gateway RSS (MiB)", lambda r: f"{r['rss_mb']:.0f}"),
        ("agent graph walk, first / second (ms)", lambda r: f"{r['walk_ms'][0]:.0f} / {r['walk_ms'][1]:.0f}"),
        ("  companies listed", lambda r: f"{r['listed']:,}"),
        (
            "errors (discovery, flows)",
            lambda r: f"{r['one']['errors'] + r['spread']['errors']}, {r['flows']['errors'] + r['paced']['errors']}",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    out = []
    for name, cell in rows:
        out.append(name.ljust(width) + "".join(cell(r).rjust(14) for r in results))
    return "\n".join(out)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,1000,10000", help="company counts, ascending")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per load run")
    ap.add_argument("--idle", type=float, default=15.0, help="seconds of the no-traffic CPU window")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between background rounds")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--buyers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved one-company / spread discovery rounds")
    ap.add_argument("--flow-rate", type=float, default=20.0, help="offered signed flows/s of the paced run")
    args = ap.parse_args()
    counts = sorted(int(c) for c in args.counts.split(","))
    from ucp_gateway.db.embedded import start_embedded, stop_embedded

    tmp = Path(tempfile.mkdtemp(prefix="ucpgw-tenants-"))
    os.chmod(tmp, 0o755)
    server, dsn = await start_embedded(tmp / "pg")
    ring = "k1:" + base64.b64encode(os.urandom(32)).decode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCPGW_") and k != "DATABASE_URL"}
    env.update(cf.gateway_env(dsn, ring, tmp))
    env.update(UCPGW_KEYS_SCHEDULER_INTERVAL=str(args.interval), UCPGW_RETENTION_INTERVAL=str(args.interval))
    env.update(UCPGW_PLATFORM_HOSTS='["platform.localhost"]')  # the agent graph's host (127.0.0.1 is a company's)
    results = []
    try:
        await cf._prepare(dsn, ring, tmp / "keys")  # the demo company (1), its catalogue and first key
        pport = cf._free_port()
        buyers = [cf.Buyer(i, f"http://127.0.0.1:{pport}") for i in range(args.buyers)]
        platform = await cf._platform(buyers, pport)
        pg_pid = int((tmp / "pg" / "pg" / "postmaster.pid").read_text().split()[0])
        have = 1
        try:
            for n in counts:
                import_s = _import(env, tmp, have, n)
                if n > have:
                    await _vacuum(dsn)
                have = max(have, n)
                results.append(await _measure(n, env, args, buyers, pg_pid, import_s))
                print(f"measured {n} companies", file=sys.stderr)
        finally:
            await platform.cleanup()
    finally:
        await stop_embedded(server)
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"tenants: {args.seconds:g} s per load run, {args.connections} discovery connections,"
        f" {args.buyers} buyer agents, one gateway process (shared machine: compare within one run)"
    )
    print(_table(results, args))


if __name__ == "__main__":
    asyncio.run(main())

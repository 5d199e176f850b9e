"""Checkout-flow benchmark: signed create -> update -> complete flows at 32 concurrent buyer agents.

Two gateway configurations, each in its own process (its own event loop) on the embedded PostgreSQL:

  signed: RFC 9421 verification on every request, signed complete responses, every call an audited
          verb dispatch (the production path);
  plain:  no signature middleware, unsigned requests, ``commerce_via_verbs=false`` (no audit rows);
          the company then lets an unproven agent complete (``access.levels``), so flows place orders;
  verbs:  (only with ``--modes``) unsigned as plain, but every call an audited verb dispatch as signed:
          signed - verbs is the cost of signatures, verbs - plain that of the verb runtime;
  nometrics: (only with ``--modes``) signed, with the Prometheus metrics off (``metrics_enabled``):
          ``--modes signed,nometrics`` measures what the metrics cost.

Each buyer agent has its own EC P-256 key and platform profile (served by this process on
127.0.0.1) and loops: create (1 item) -> update (shipping destination + option, code 10OFF) ->
complete (demo payment token), each on its own keep-alive connection through a minimal HTTP/1.1
client (the load generator shares the 2 cores, so it must be cheap). By default all buyers buy the
same item: one hot inventory row, locked by every complete until its COMMIT is flushed (the worst
case, a flash sale); ``--items N`` spreads buyer i over the first N demo products (i mod N), as
ordinary traffic does. The gateway runs as in production apart from http profile URLs
(development mode): one process per core (``--workers``), the default pool size (two per core plus
two, shared out over the processes: 6 in all here), logging at error level, output shape checks
off. The webhook worker is off (delivery is asynchronous).

PostgreSQL's WAL is warmed first, as on a server that has been running: the embedded cluster is
brand new, so until its first checkpoint every 16 MB WAL segment is a new file that PostgreSQL
fills with zeros while every committer waits (30-40 ms here; a signed flow writes about 30 kB of
WAL, so one such stall every 4-6 s, which is what p99 measured). A running server reuses old
segments that its checkpoints recycled, with no such stall. The bench creates the segments its
runs will need and checkpoints, so they are recycled ones; ``--cold-wal`` skips this to show the
fresh-cluster figures.

Each configuration is measured under two loads (``--seconds`` after ``--warmup``, in each round):

  (a) saturation: every buyer sends its next request as soon as the previous answer arrives (no
      think time). Gives the throughput: the >= 100 signed flows/s target and the cost of
      signatures + audit (throughput lost, signed vs plain) compare these runs.
  (b) target load: each buyer thinks between calls, paced so that the 32 buyers together offer
      ``--rate`` (100) flows/s; a late request is sent at once, never in a burst. Gives the
      achieved flows/s and the per-request p50/p99 that the p99 < 50 ms target is about.

Why two runs: with N closed-loop buyers and no think time, Little's law makes the mean latency
N / (request rate), so p99 < 50 ms at 32 buyers would need > 640 requests/s; real buyer agents
(LLM agents) think between calls, so latency is judged at the offered target load instead.

Rounds (``--rounds``, 2): every configuration's gateway runs from the start, and each round runs
(a) and (b) of every configuration in turn, in ABBA order (signed, plain | plain, signed | ...).
This VM's speed drifts by up to a factor of two within minutes (CPU ms per flow of the same code),
more than the difference being measured; one configuration measured after the other compared two
machines. Interleaved rounds give both configurations the same mix of fast and slow phases and
table sizes. Each printed figure pools that configuration's runs of every round; the cost is also
printed per round, so its spread is visible.

Printed per configuration and load: flows/s, per-request p50/p99 (ms), CPU ms per flow of the
gateway process, PostgreSQL (postmaster and backends) and the load generator (this process), and
with ``--waits`` the mean number of gateway backends per wait event (row locks name the waiting
statement). On a shared machine prefer the CPU figures; repeat wall-clock figures. With three rounds
or more, the cost is also given as the mean of the rounds with its 95 % confidence interval.

The disk: every COMMIT waits for PostgreSQL's fdatasync of its WAL, and this VM's disk stalls a
sync for 0.1-1.6 s now and then, idle or not (measured with nothing else running). All commits in
flight wait it out, in every configuration alike: such a stall in a 5 s window decides that run's
p99. So each measured window also times an 8 KiB write + fdatasync every 20 ms in the cluster's
directory and prints the disk's p99 and worst sync next to the run. ``--data-dir /dev/shm`` puts
the cluster on tmpfs: the same code and the same commits, without the disk (what the software costs).

Usage: python bench/checkout_flow.py [--buyers 32] [--items 1] [--seconds 10] [--warmup 3] [--rate 100]
       [--rounds 2] [--workers N] [--waits] [--profile DIR] [--log-sql FILE] [--modes signed,plain] [--cold-wal]
       [--data-dir DIR]
       (--workers N: N gateway processes on the port, by default one per core, as production runs
       ``serve --workers N`` on this machine; --workers 1 measures one event loop, which is then the
       bottleneck at saturation. They bind with SO_REUSEPORT so that each is this script's own
       child; ``serve --workers N`` shares one socket instead; BENCH_POOL_MAX sets each
       one's pool size instead of the default)
       (BENCH_EVENT_LOOP=asyncio runs the gateway on asyncio's own loop instead of uvloop)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import orjson
from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from ucp_gateway.config import usable_cores
from ucp_gateway.httpsig.rfc9530 import content_digest

V = "2026-04-08"
PRODUCTS = ("pot_ceramic", "bouquet_roses", "bouquet_sunflowers", "bouquet_tulips", "orchid_white", "gardenias")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _b64u(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()


class Buyer:
    """One buyer agent: key, profile URL, and a minimal RFC 9421 signer (base per §2.5). The
    signer is part of what the bench measures (it shares the 2 cores), so it keeps what does not
    change per request: the base's template per request shape, and each body's digest."""

    def __init__(self, i: int, base: str, item: str = "pot_ceramic"):
        self.item = item
        self.kid = f"buyer-{i}"
        self.priv = ec.generate_private_key(ec.SECP256R1())
        n = self.priv.public_key().public_numbers()
        self.jwk = {"kty": "EC", "crv": "P-256", "x": _b64u(n.x), "y": _b64u(n.y), "kid": self.kid}
        self.profile = f"{base}/profile/{i}.json"
        self.ucp_agent = f'profile="{self.profile}"'
        # the flow's request bodies, serialised once (the load generator's CPU is the machine's too)
        create = {"line_items": [{"item": {"id": item}, "quantity": 1}]}
        self.bodies = tuple(json.dumps(body).encode() for body in (create, update_body(item), PAY_BODY))

    def headers(self, method: str, authority: str, path: str, body: bytes, key: str | None, sign: bool) -> dict:
        h = {"UCP-Agent": self.ucp_agent}
        if body:
            h["Content-Type"] = "application/json"
        if key:
            h["Idempotency-Key"] = key
        if not sign:
            return h
        inner, template = _signature_shape(bool(body), bool(key))
        values = [method, authority, path]
        if body:
            h["Content-Digest"] = _content_digest(body)
            values += (h["Content-Digest"], "application/json")
        values.append(self.ucp_agent)
        if key:
            values.append(key)
        params = f'{inner};created={int(time.time())};keyid="{self.kid}"'
        values.append(params)
        r, s = decode_dss_signature(self.priv.sign((template % tuple(values)).encode(), _ES256))
        h["Signature-Input"] = f"sig1={params}"
        h["Signature"] = "sig1=:" + base64.b64encode(r.to_bytes(32, "big") + s.to_bytes(32, "big")).decode() + ":"
        return h


_ES256 = ec.ECDSA(hashes.SHA256())


# RFC 9530 Content-Digest of a body, once per body (a buyer's three bodies never change)
_content_digest = functools.lru_cache(maxsize=64)(content_digest)


@functools.cache
def _signature_shape(body: bool, key: bool) -> tuple[str, str]:
    """The covered components of a buyer request (RFC 9421 §2.5) as the inner list
    ``("@method" ...)`` and the signature base with a ``%s`` per value (the last one
    ``@signature-params``)."""
    names = ["@method", "@authority", "@path"]
    if body:
        names += ["content-digest", "content-type"]
    names.append("ucp-agent")
    if key:
        names.append("idempotency-key")
    inner = "(" + " ".join(f'"{n}"' for n in names) + ")"
    return inner, "".join(f'"{n}": %s\n' for n in names) + '"@signature-params": %s'


def _profile(buyer: Buyer, base: str) -> dict:
    def cap(n, extends=None):
        e = {
            "version": V,
            "spec": f"https://ucp.dev/{V}/specification/{n}",
            "schema": f"https://ucp.dev/{V}/schemas/shopping/{n}.json",
        }
        if extends:
            e["extends"] = "dev.ucp.shopping.checkout"
        return e

    caps = {"dev.ucp.shopping.checkout": [cap("checkout")]}
    for n in ("fulfillment", "discount", "buyer_consent"):
        caps[f"dev.ucp.shopping.{n}"] = [cap(n, True)]
    caps["dev.ucp.shopping.order"] = [{**cap("order"), "config": {"webhook_url": base + "/webhooks"}}]
    return {
        "ucp": {"version": V, "services": {}, "capabilities": caps, "payment_handlers": {}},
        "signing_keys": [buyer.jwk],
    }


async def _platform(buyers: list[Buyer], port: int) -> web.AppRunner:
    base = f"http://127.0.0.1:{port}"
    docs = {str(i): json.dumps(_profile(b, base)).encode() for i, b in enumerate(buyers)}

    async def profile(request):
        return web.Response(
            body=docs[request.match_info["i"]],
            content_type="application/json",
            headers={"Cache-Control": "public, max-age=3600"},
        )

    async def hook(request):
        return web.json_response({"ucp": {"version": V, "status": "success"}})

    app = web.Application()
    app.router.add_get("/profile/{i}.json", profile)
    app.router.add_post("/webhooks", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


class Connection:
    """A minimal keep-alive HTTP/1.1 client on one asyncio stream (the load generator shares the
    2 cores with the gateway and PostgreSQL, so it must be cheap: aiohttp's client costs ~1 ms of
    CPU per request here, this one a fraction of it). Reconnects after a connection is closed."""

    def __init__(self, port: int, authority: str):
        self.port, self.authority = port, authority
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, headers: dict, body: bytes) -> tuple[int, bytes]:
        """Send one request; returns (status, body). Only Content-Length responses (all the gateway sends)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.authority}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            raise
        status, length, close = int(head[9:12]), None, False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
            elif name == b"transfer-encoding":
                raise RuntimeError("chunked response: not supported by the bench client")
        data = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _flow(c: Connection, b: Buyer, authority: str, sign: bool, lat: list, pace=None) -> bool:
    async def call(method, path, raw: bytes, key=None):
        if pace is not None:
            await pace()  # think time
        h = b.headers(method, authority, path, raw, key, sign)
        t0 = time.perf_counter()
        status, data = await c.request(method, path, h, raw)
        lat.append(time.perf_counter() - t0)
        if status >= 300:
            raise RuntimeError(f"{method} {path} -> {status} {data[:200]!r}")
        return orjson.loads(data)

    create, update, pay = b.bodies
    co = await call("POST", "/ucp/v1/checkout-sessions", create, str(uuid.uuid4()))
    co = await call("PUT", f"/ucp/v1/checkout-sessions/{co['id']}", update, str(uuid.uuid4()))
    done = await call("POST", f"/ucp/v1/checkout-sessions/{co['id']}/complete", pay, str(uuid.uuid4()))
    return done.get("status") == "completed"


def update_body(item: str) -> dict:
    """The flow's PUT: one ``item``, a US shipping destination, the standard option, code 10OFF."""
    return {
        "line_items": [{"item": {"id": item}, "quantity": 1}],
        "discounts": {"codes": ["10OFF"]},
        "fulfillment": {
            "methods": [
                {
                    "type": "shipping",
                    "destinations": [
                        {"id": "d", "street_address": "1 Elm St", "address_country": "US", "postal_code": "62704"}
                    ],
                    "selected_destination_id": "d",
                    "groups": [{"selected_option_id": "std-ship"}],
                }
            ]
        },
    }


# the flow's complete: the demo card that the mock payment handler approves
PAY_BODY = {
    "payment": {
        "instruments": [
            {
                "id": "instr_1",
                "handler_id": "mock_payment_handler",
                "type": "card",
                "credential": {"type": "token", "token": "success_token"},
            }
        ]
    }
}


def gateway_env(dsn: str, ring: str, tmp: Path, pool_max: str | None = None) -> dict[str, str]:
    """The gateway's settings in these benchmarks: production apart from http profile URLs on
    127.0.0.1 (development mode); no webhook worker, error-level logs, no buyer rate limit.
    ``pool_max`` None: the default pool size (two per core plus two, Settings.db_pool_size)."""
    env = dict(
        UCPGW_DATABASE_URL=dsn,
        UCPGW_ENVIRONMENT="development",
        UCPGW_PUBLIC_SCHEME="http",
        UCPGW_KEK_RING=ring,
        UCPGW_DEV_PROFILE_HOSTS='["127.0.0.1"]',
        UCPGW_WEBHOOK_WORKER="false",
        UCPGW_LOG_LEVEL="error",
        UCPGW_BUYER_RATE_LIMIT="100000",
        UCPGW_VERBS_VALIDATE_OUTPUT="false",  # production default (development mode turns it on)
        UCPGW_EVENT_LOOP=os.environ.get("BENCH_EVENT_LOOP", "auto"),  # auto: uvloop when installed, as serve
        UCPGW_KEYS_DIR=str(tmp / "keys"),
        UCPGW_DATA_DIR=str(tmp / "data"),
    )
    if pool_max:
        env["UCPGW_DB_POOL_MAX"] = pool_max
    return env


def _cpu_times(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each of ``pids`` and their children (PostgreSQL backends), by pid."""
    import psutil

    out: dict[int, float] = {}
    for pid in pids:
        try:
            procs = (psutil.Process(pid), *psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            continue
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.Error:  # exited meanwhile
                continue
            out[p.pid] = t.user + t.system
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two :func:`_cpu_times` readings: each process alive at the end
    counts what it spent since the first (all of it if it started meanwhile). A process that exited
    in between (an autovacuum worker, a closed backend) is left out: summing totals instead took
    its whole past off the figure, and PostgreSQL's CPU per flow once read -0.7 ms."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


async def _sample_waits(dsn: str, seconds: float) -> dict[str, float]:
    """Mean number of gateway backends per wait event (``Lock:transactionid`` = row locks, ...) and
    active on CPU (``CPU``), sampled every 20 ms from pg_stat_activity for ``seconds``."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    counts: dict[str, int] = {}
    n = 0
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            rows = await conn.fetch(
                "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')"
                " || CASE WHEN wait_event_type = 'Lock' THEN ' (' || left(query, 30) || ')' ELSE '' END AS w,"
                " count(*) AS c FROM pg_stat_activity"
                " WHERE usename = 'ucp_gateway_app' AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1"
            )
            for r in rows:
                counts[r["w"]] = counts.get(r["w"], 0) + r["c"]
            n += 1
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    return {k: v / max(n, 1) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


class DiskProbe:
    """What the disk does to commits while a run is measured: a thread writes 8 KiB to a file in the
    embedded cluster's directory and ``fdatasync``s it every ``interval`` seconds (as PostgreSQL does
    its WAL at each COMMIT), timing each sync. On this VM an idle disk stalls a sync for up to
    1-2 s now and then; every commit waits that long, in every configuration alike, and no code
    of the gateway can hide it. ``--data-dir /dev/shm`` takes the disk out (tmpfs syncs are no-ops).
    The thread sleeps in the syscalls (the GIL is released), so it costs the load generator nothing
    measurable."""

    def __init__(self, directory: Path, interval: float = 0.02):
        self.path, self.interval = directory / "bench-disk-probe", interval
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> DiskProbe:
        self._thread = threading.Thread(target=self._run, name="disk-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def _run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            block = os.urandom(8192)
            while not self._stop.wait(self.interval):
                t0 = time.perf_counter()
                os.pwrite(fd, block, 0)
                os.fdatasync(fd)
                self.latencies.append(time.perf_counter() - t0)
        finally:
            os.close(fd)
            self.path.unlink(missing_ok=True)


def disk_summary(latencies: list[float]) -> str:
    """``latencies`` (seconds) of the probe's syncs as "fdatasync p99 X ms, max Y ms, N over 50 ms"."""
    if not latencies:
        return "fdatasync: no sample"
    lat = sorted(latencies)
    slow = sum(x > 0.05 for x in lat)
    return (
        f"fdatasync p99 {1000 * lat[int(0.99 * (len(lat) - 1))]:.1f} ms, max {1000 * lat[-1]:.1f} ms,"
        f" {slow} of {len(lat)} over 50 ms"
    )


# two-sided 95 % Student t quantiles by degrees of freedom (scipy is no dependency of the bench)
_T95 = {
    1: 12.71,
    2: 4.30,
    3: 3.18,
    4: 2.78,
    5: 2.57,
    6: 2.45,
    7: 2.36,
    8: 2.31,
    9: 2.26,
    10: 2.23,
    12: 2.18,
    15: 2.13,
    20: 2.09,
    25: 2.06,
    30: 2.04,
    40: 2.02,
    60: 2.00,
}


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """Mean of ``values`` and the half-width of its 95 % confidence interval (Student t; the rounds
    are independent samples of the same cost). Needs at least two values."""
    n = len(values)
    df = n - 1
    t = _T95[max(k for k in _T95 if k <= df)] if df < 60 else 1.96
    return statistics.fmean(values), t * statistics.stdev(values) / n**0.5


async def _load(
    port: int,
    buyers: list[Buyer],
    sign: bool,
    seconds: float,
    warmup: float,
    *,
    rate: float | None = None,
    cpu_pids: tuple[list[int], list[int]] = ([], []),
    waits_dsn: str | None = None,
    probe_dir: Path | None = None,
) -> dict:
    """Run the buyers for ``warmup + seconds``; measure the last ``seconds``.

    ``rate`` None: closed loop, no think time (saturation). Else each buyer paces its requests so
    the offered load is ``rate`` flows/s in all (think time = the rest of its slot; a request that
    is late is sent at once, without a burst to catch up).
    """
    authority = f"127.0.0.1:{port}"
    lat: list[float] = []
    flows = errors = 0
    measuring = False
    stop = time.perf_counter() + warmup + seconds
    slot = len(buyers) / rate / 3 if rate else 0.0  # seconds between one buyer's requests

    async def worker(i: int, b: Buyer):
        nonlocal flows, errors
        c = Connection(port, authority)
        pace = None
        if slot:
            await asyncio.sleep(slot * 3 * i / len(buyers))  # spread the buyers over one flow's slot
            nxt = time.perf_counter()

            async def pace():
                nonlocal nxt
                delay = nxt - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                nxt = max(nxt, time.perf_counter()) + slot

        while time.perf_counter() < stop:
            mine: list[float] = []
            try:
                ok = await _flow(c, b, authority, sign, mine, pace)
            except Exception as exc:
                errors += 1
                if errors < 4:
                    print("  error:", str(exc)[:300], file=sys.stderr)
                continue
            if measuring and time.perf_counter() < stop:
                flows += ok
                lat.extend(mine)

    tasks = [asyncio.create_task(worker(i, b)) for i, b in enumerate(buyers)]
    await asyncio.sleep(warmup)
    measuring = True
    probe = DiskProbe(probe_dir) if probe_dir is not None else None
    cpu0, own0 = [_cpu_times(p) for p in cpu_pids], time.process_time()
    if probe is not None:
        probe.__enter__()
    try:
        waits = await _sample_waits(waits_dsn, seconds) if waits_dsn else await asyncio.sleep(seconds)
    finally:
        if probe is not None:
            probe.__exit__(None, None, None)
    cpu1, own1 = [_cpu_times(p) for p in cpu_pids], time.process_time()
    await asyncio.gather(*tasks)
    return {
        "seconds": seconds,
        "flows": flows,
        "lat": lat,
        "errors": errors,
        # gateway, postgres, buyers (s)
        "cpu": [cpu_delta(a, b) for a, b in zip(cpu0, cpu1, strict=True)] + [own1 - own0],
        "waits": waits or {},
        "disk": probe.latencies if probe is not None else [],
    }


def _summary(runs: list[dict]) -> dict:
    """Pool the slices of one (mode, phase) from every round: flows/s over their measured seconds,
    p50/p99 over all their latencies, CPU ms per flow from their summed CPU seconds."""
    seconds = sum(r["seconds"] for r in runs)
    lat = sorted(x for r in runs for x in r["lat"])
    done = max(sum(r["flows"] for r in runs), 1)
    cpu = [sum(r["cpu"][i] for r in runs) for i in range(3)]
    waits: dict[str, float] = {}
    for r in runs:
        for k, v in r["waits"].items():
            waits[k] = waits.get(k, 0.0) + v / len(runs)
    return {
        "flows_s": sum(r["flows"] for r in runs) / seconds,
        "p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
        "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else float("nan"),
        "requests": len(lat),
        "errors": sum(r["errors"] for r in runs),
        "cpu_gw_ms": 1000 * cpu[0] / done,
        "cpu_pg_ms": 1000 * cpu[1] / done,
        "cpu_client_ms": 1000 * cpu[2] / done,
        "waits": dict(sorted(waits.items(), key=lambda kv: -kv[1])),
        "disk": [x for r in runs for x in r.get("disk", [])],
    }


def without_signature_middleware(components: list) -> None:
    """Replace httpsig's entry of ``ucp_gateway.app.COMPONENTS`` by one that installs everything of it
    but the signature middleware: its resources stay, since the other subsystems read them on every
    request (discovery's trust check reads the block cache). The unsigned modes measure the rest."""
    from ucp_gateway.httpsig.web import signature_middleware

    i = next(i for i, c in enumerate(components) if c.__name__ == "_httpsig_setup")
    setup = components[i]

    def _httpsig_unverified(app) -> None:
        setup(app)
        app.middlewares.remove(signature_middleware)

    components[i] = _httpsig_unverified


def _child(mode: str, port: int) -> None:
    """Run the gateway in this process (``--child``) as ``ucp-gateway serve`` does: its settings,
    logging, event loop (uvloop when installed) and :func:`run_server` (SIGTERM stops it)."""
    import ucp_gateway.app as gateway_app
    from ucp_gateway.config import Settings
    from ucp_gateway.logs import configure_logging
    from ucp_gateway.serve import run, run_server

    settings = Settings(host="127.0.0.1", port=port)
    configure_logging(settings)  # as `ucp-gateway serve` does (UCPGW_LOG_LEVEL honoured)
    if mode in ("plain", "verbs"):  # no signature middleware (the production app always has it)
        without_signature_middleware(gateway_app.COMPONENTS)
    reuse_port = os.environ.get("BENCH_WORKERS", "1") != "1"  # one of N processes on the port
    ready_dir = os.environ.get("BENCH_READY_DIR")

    async def ready(app) -> None:  # the parent waits for every worker, not just the first
        if ready_dir:
            Path(ready_dir, str(os.getpid())).touch()

    prof_dir = os.environ.get("BENCH_PROFILE_DIR")
    if not prof_dir:
        run(settings, run_server(settings, before_serve=ready, reuse_port=reuse_port))
        return
    import cProfile

    prof = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
    prof.enable()
    try:
        run(settings, run_server(settings, before_serve=ready, reuse_port=reuse_port))
    finally:
        prof.disable()
        prof.dump_stats(os.path.join(prof_dir, f"gateway-{mode}-{os.getpid()}.prof"))


async def _prepare(
    dsn: str, ring: str, keys_dir: Path, log_sql: bool = False, anonymous_complete: bool = False
) -> None:
    """Seed the demo company (stock without end, an active signing key). ``anonymous_complete``: its
    access table lets an unproven agent complete (``access.levels``, docs/access.md), so that the
    unsigned modes place orders instead of handing off to the buyer (``buyer_handoff_required``)."""
    from ucp_gateway.config import Settings
    from ucp_gateway.db import tenant_tx
    from ucp_gateway.db.database import connect_database
    from ucp_gateway.demo.seed import seed_demo
    from ucp_gateway.keys import KekRing, Vault, attach_vault, ensure_active_key

    # the gateway's KEK ring: the company's first signing key is created with it by the seed
    settings = Settings(database_url=dsn, environment="development", kek_ring=ring, keys_dir=keys_dir)
    db = await connect_database(settings)
    try:
        company = (await seed_demo(db, settings)).company
        async with tenant_tx(db.pool, company.id) as conn:
            await conn.execute("UPDATE inventory SET quantity = 1000000000")
            if anonymous_complete:
                levels = {"access": {"levels": {"checkout.complete": "anonymous"}}}
                await conn.execute(
                    "UPDATE companies SET settings = coalesce(settings, '{}'::jsonb) || $1::text::jsonb WHERE id = $2",
                    json.dumps(levels),
                    company.id,
                )
        vault = Vault(KekRing.parse(ring))
        attach_vault(db.pool, vault)
        from datetime import UTC, datetime

        await ensure_active_key(db.pool, company.id, now=datetime.now(UTC), vault=vault)
        if log_sql:  # every statement into <pg>/log, to count round trips per request
            import asyncpg

            owner = await asyncpg.connect(dsn)
            try:
                await owner.execute("ALTER SYSTEM SET log_statement = 'all'")
                await owner.execute("ALTER SYSTEM SET log_line_prefix = '%m [%p] '")
                await owner.execute("SELECT pg_reload_conf()")
            finally:
                await owner.close()
    finally:
        await db.close()


async def _warm_wal(dsn: str, segments: int) -> None:
    """Have PostgreSQL create ``segments`` WAL segment files, then checkpoint so that they are
    recycled for the runs' WAL (see the module docstring); as the cluster owner."""
    import asyncpg

    owner = await asyncpg.connect(dsn)
    try:
        await owner.execute("CREATE TEMP TABLE bench_wal_warm (x int)")
        for _ in range(segments):  # a switch needs some WAL since the last one
            await owner.execute("INSERT INTO bench_wal_warm VALUES (1)")
            await owner.fetchval("SELECT pg_switch_wal()")
        await owner.execute("CHECKPOINT")
    finally:
        await owner.close()


def _spawn(mode: str, port: int, env: dict, workers: int = 1) -> list[subprocess.Popen]:
    """Start the gateway of ``mode``: ``workers`` processes listening on ``port`` (SO_REUSEPORT when
    more than one); returns once every one of them is serving."""
    e = dict(env, BENCH_WORKERS=str(workers), BENCH_READY_DIR=tempfile.mkdtemp(prefix="ucpgw-ready-"))
    e["UCPGW_WORKERS"] = str(workers)  # as serve --workers N: the default pool is shared out over them
    if mode == "plain":
        e["UCPGW_COMMERCE_VIA_VERBS"] = "false"
    if mode == "nometrics":
        e["UCPGW_METRICS_ENABLED"] = "false"
    cmd = [sys.executable, __file__, "--child", mode, "--port", str(port)]
    procs = [subprocess.Popen(cmd, env=e) for _ in range(workers)]
    for _ in range(600):
        if all(Path(e["BENCH_READY_DIR"], str(p.pid)).exists() for p in procs):
            shutil.rmtree(e["BENCH_READY_DIR"], ignore_errors=True)
            return procs
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.1)
    for p in procs:
        p.kill()
    raise SystemExit("gateway did not start")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--buyers", type=int, default=32)
    ap.add_argument(
        "--items", type=int, default=1, choices=range(1, len(PRODUCTS) + 1), help="products bought (1: one hot row)"
    )
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument(
        "--workers",
        type=int,
        default=usable_cores(),
        help="gateway processes on the port (serve --workers N); default one per core, as in production",
    )
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of interleaved runs (ABBA order); each figure pools its runs of every round",
    )
    ap.add_argument("--rate", type=float, default=100.0, help="offered flows/s of the think-time run (b)")
    ap.add_argument("--profile", metavar="DIR", help="cProfile each gateway process into DIR/gateway-<mode>.prof")
    ap.add_argument("--waits", action="store_true", help="sample PostgreSQL wait events during each run")
    ap.add_argument("--log-sql", metavar="FILE", help="log every SQL statement; copy the server log to FILE")
    ap.add_argument(
        "--cold-wal",
        action="store_true",
        help="do not warm PostgreSQL's WAL first: every new 16 MB segment stalls the commits (a fresh cluster)",
    )
    ap.add_argument(
        "--data-dir",
        metavar="DIR",
        help="where the embedded cluster lives (default: the temp directory); /dev/shm (tmpfs) takes the"
        " disk's fsync stalls out of the figures",
    )
    ap.add_argument(
        "--modes",
        default="signed,plain",
        help="configurations to run, comma-separated: signed, plain, verbs (unsigned requests, but every"
        " call an audited verb dispatch: separates the cost of signatures from that of the verb runtime)"
        " and nometrics (signed, metrics off: the cost of the metrics)",
    )
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"signed", "plain", "verbs", "nometrics"}:
        ap.error("--modes takes signed, plain, verbs and/or nometrics")
    from ucp_gateway.db.embedded import start_embedded, stop_embedded

    tmp = Path(tempfile.mkdtemp(prefix="ucpgw-bench-", dir=args.data_dir))
    server, dsn = await start_embedded(tmp / "pg")
    ring = "k1:" + base64.b64encode(os.urandom(32)).decode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCPGW_") and k != "DATABASE_URL"}
    env.update(gateway_env(dsn, ring, tmp, os.environ.get("BENCH_POOL_MAX")))
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        env["BENCH_PROFILE_DIR"] = os.path.abspath(args.profile)
    try:
        unsigned = bool({"plain", "verbs"} & set(modes))
        await _prepare(dsn, ring, tmp / "keys", bool(args.log_sql), anonymous_complete=unsigned)
        if not args.cold_wal:  # ~30 kB of WAL per signed flow, at most ~320 flows/s here, 2 runs per mode and round
            wal = 30e3 * 320 * (args.warmup + args.seconds) * 2 * len(modes) * args.rounds
            await _warm_wal(dsn, 2 + int(wal // (16 << 20)))
        pport = _free_port()
        buyers = [Buyer(i, f"http://127.0.0.1:{pport}", PRODUCTS[i % args.items]) for i in range(args.buyers)]
        platform = await _platform(buyers, pport)
        pg_pid = int((tmp / "pg" / "pg" / "postmaster.pid").read_text().split()[0])
        runs: dict[tuple[str, str], list[dict]] = {(m, ph): [] for m in modes for ph in ("saturation", "target")}
        ports = {m: _free_port() for m in modes}
        gateways: dict[str, list[subprocess.Popen]] = {}
        try:
            for mode in modes:  # all configurations up at once: an idle one costs nothing
                gateways[mode] = _spawn(mode, ports[mode], env, args.workers)
            for rnd in range(args.rounds):
                # interleaved, in ABBA order: this VM's speed drifts by more than what is compared
                for mode in modes if rnd % 2 == 0 else modes[::-1]:
                    for phase, rate in (("saturation", None), ("target", args.rate)):
                        runs[mode, phase].append(
                            await _load(
                                ports[mode],
                                buyers,
                                mode in ("signed", "nometrics"),
                                args.seconds,
                                args.warmup,
                                rate=rate,
                                cpu_pids=([p.pid for p in gateways[mode]], [pg_pid]),
                                waits_dsn=dsn if args.waits else None,
                                probe_dir=tmp,
                            )
                        )
        finally:
            procs = [p for ps in gateways.values() for p in ps]
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(timeout=30)
        await platform.cleanup()
        if args.log_sql:
            shutil.copy(tmp / "pg" / "pg" / "log", args.log_sql)
    finally:
        await stop_embedded(server)

        shutil.rmtree(tmp, ignore_errors=True)  # the embedded data directory (tens of MB per run)
    print(
        f"checkout flows (create -> update -> complete), {args.buyers} buyer agents, {args.seconds:.0f} s per run,"
        f" {args.items} product{'s' if args.items > 1 else ' (one hot inventory row)'},"
        f" {args.workers} gateway process{'es' if args.workers > 1 else ''} per configuration"
    )
    results = {key: _summary(rs) for key, rs in runs.items()}
    names = {
        "signed": "signed + audited",
        "plain": "no signatures, no audit",
        "verbs": "unsigned, audited",
        "nometrics": "signed, metrics off",
    }
    labels = [(m, names[m]) for m in modes]
    for phase, title in (
        ("saturation", "(a) saturation: no think time"),
        ("target", f"(b) at the target load: think time paced to offer {args.rate:.0f} flows/s"),
    ):
        print(title)
        for mode, label in labels:
            r = results[mode, phase]
            print(
                f"  {label:24s} {r['flows_s']:6.1f} flows/s   p50 {r['p50_ms']:6.1f} ms   p99 {r['p99_ms']:7.1f} ms"
                f"   cpu ms/flow: gateway {r['cpu_gw_ms']:4.1f}, postgres {r['cpu_pg_ms']:4.1f},"
                f" buyers {r['cpu_client_ms']:4.1f}"
                f"   ({r['requests']} requests, {r['errors']} errors)"
            )
            print(f"      disk under the cluster: {disk_summary(r['disk'])}")
            if r["waits"]:
                print("      backends waiting:", ", ".join(f"{k} {v:.1f}" for k, v in list(r["waits"].items())[:6]))
    if "signed" in modes and "nometrics" in modes:
        on, off = results["signed", "saturation"]["flows_s"], results["nometrics", "saturation"]["flows_s"]
        per = [
            1 - s["flows"] / p["flows"] if p["flows"] else float("nan")
            for s, p in zip(runs["signed", "saturation"], runs["nometrics", "saturation"], strict=True)
        ]
        print(
            f"cost of the metrics (saturation): {100 * (1 - on / off if off else float('nan')):.1f} % of throughput"
            f" (by round: {', '.join(f'{100 * c:.1f}' for c in per)} %)"
        )
    if "signed" in modes and "plain" in modes:
        sig, plain = results["signed", "saturation"]["flows_s"], results["plain", "saturation"]["flows_s"]
        cost = 1 - sig / plain if plain else float("nan")
        per_round = [
            1 - s["flows"] / p["flows"] if p["flows"] else float("nan")
            for s, p in zip(runs["signed", "saturation"], runs["plain", "saturation"], strict=True)
        ]
        rounds = f" (by round: {', '.join(f'{100 * c:.1f}' for c in per_round)} %)" if len(per_round) > 1 else ""
        print(f"cost of signatures + audit (saturation): {100 * cost:.1f} % of throughput{rounds}")
        if len(per_round) > 2:
            mean, half = mean_ci95(per_round)
            print(
                f"  mean of the rounds {100 * mean:.1f} %, 95 % confidence interval {100 * (mean - half):.1f}"
                f" to {100 * (mean + half):.1f} %"
            )


if __name__ == "__main__":
    if "--child" in sys.argv:
        p = argparse.ArgumentParser()
        p.add_argument("--child")
        p.add_argument("--port", type=int)
        a = p.parse_args()
        _child(a.child, a.port)
    else:
        # the load generator shares the 2 cores with what it measures: uvloop when installed (as the
        # gateway), about a quarter less of its CPU per flow than asyncio's selector loop
        try:
            import uvloop
        except ImportError:
            uvloop = None
        with asyncio.Runner(loop_factory=uvloop.new_event_loop if uvloop else None) as runner:
            runner.run(main())

"""Discovery benchmark: ``GET /.well-known/ucp`` requests/s through the gateway and through a bare
aiohttp handler that returns the same bytes, in one run (target: gateway >= 0.8x bare).

Each server runs in its own process (one core); the load generator is a minimal keep-alive HTTP/1.1
client on raw asyncio streams in this process (the other core), so both servers are measured with
the same, cheap client. The gateway is served the way production serves it: ``serve.run`` +
``serve.run_server`` (what ``ucp-gateway serve`` runs in its one process, or in each worker), so the
real ``create_app`` (foundation layer, subsystem middlewares, host cache, discovery routes) behind the
front path (``serve.install_front``), on a real PostgreSQL (``DATABASE_URL`` or embedded);
``--no-front`` serves it without the front path (every request through aiohttp's router and
middleware chain). Every server runs on the same event loop, ``--event-loop`` (default ``auto``:
production's choice, uvloop when installed; ``serve.loop_factory``).

Figures: for each server the median over rounds of wall req/s and of requests per server CPU-second
(user + system seconds of the server process, /proc), and the median of the per-round ratios to the
bare server measured right before or after it (so slow drifts of background load cancel out). Run it
under ``flock /tmp/bench.lock`` on shared machines and repeat it before believing one figure.

Usage: python bench/discovery.py [--seconds 5] [--connections 32] [--rounds 5] [--log-level warning]
    [--event-loop auto|uvloop|asyncio] [--no-front]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import tempfile
import time
from pathlib import Path

HOST = "bench-shop.test"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), so figures survive a busy machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(data_dir: str, log_level: str, event_loop: str = "auto"):
    import secrets

    from ucp_gateway.config import Settings

    # production path, so production's required secret is given (a fresh one per run)
    return Settings(
        data_dir=Path(data_dir),
        log_level=log_level,
        environment="production",
        verbs_nonce_secret=secrets.token_hex(32),
        event_loop=event_loop,
    )


def _run_gateway(port: int, data_dir: str, log_level: str, event_loop: str, front: bool) -> None:
    """The gateway as ``ucp-gateway serve`` runs it: ``serve.run(settings, serve.run_server(...))``."""
    from ucp_gateway.logs import configure_logging
    from ucp_gateway.serve import bind_socket, run, run_server

    settings = _settings(data_dir, log_level, event_loop)
    configure_logging(settings)
    run(settings, run_server(settings, sock=bind_socket("127.0.0.1", port), front=front))


def _serve_app(app, port: int, event_loop: str) -> None:
    """Serve a plain aiohttp app on the gateway's event loop (``serve.run``) until terminated."""
    from aiohttp import web

    from ucp_gateway.config import Settings
    from ucp_gateway.serve import run

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    run(Settings(database_url="postgresql://unused/x", event_loop=event_loop), serve())


def _run_discovery_only(port: int, data_dir: str, log_level: str, event_loop: str) -> None:
    """The discovery component alone (its ``setup``), without the foundation middlewares."""
    from aiohttp import web

    from ucp_gateway.appkeys import CLOCK, DATABASE, SETTINGS
    from ucp_gateway.clock import SystemClock
    from ucp_gateway.db.database import connect_database
    from ucp_gateway.discovery.web import setup

    settings = _settings(data_dir, log_level, event_loop)

    async def db_ctx(app: web.Application):
        app[DATABASE] = await connect_database(settings)
        yield
        await app[DATABASE].close()

    app = web.Application()
    app[SETTINGS] = settings
    app[CLOCK] = SystemClock()
    app.cleanup_ctx.append(db_ctx)
    setup(app)
    _serve_app(app, port, event_loop)


def _run_bare(port: int, body: bytes, etag: str, event_loop: str) -> None:
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            body=body, content_type="application/json", headers={"Cache-Control": "public, max-age=300", "ETag": etag}
        )

    app = web.Application()
    app.router.add_get("/.well-known/ucp", handler)
    _serve_app(app, port, event_loop)


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return status, body


async def _load(port: int, seconds: float, connections: int, extra: str = "") -> tuple[float, int]:
    request = f"GET /.well-known/ucp HTTP/1.1\r\nHost: {HOST}\r\n{extra}\r\n".encode()
    done = 0
    errors = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done, errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop:
                status, _ = await _one(reader, writer, request)
                if status in (200, 304):
                    done += 1
                else:
                    errors += 1
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return done / (time.perf_counter() - start), errors


async def _wait_up(port: int) -> None:
    for _ in range(600):
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            status, _ = await _one(r, w, f"GET /.well-known/ucp HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
            w.close()
            if status == 200:
                return
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("server did not come up")


async def _fetch(port: int) -> tuple[bytes, str]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET /.well-known/ucp HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
    head = await r.readuntil(b"\r\n\r\n")
    headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
    body = await r.readexactly(int(headers[b"Content-Length"]))
    w.close()
    return body, headers[b"ETag"].decode()


async def _seed(data_dir: str, log_level: str) -> None:
    from ucp_gateway.db import open_database
    from ucp_gateway.errors import Conflict
    from ucp_gateway.tenancy import create_company

    async with open_database(_settings(data_dir, log_level)) as db:
        try:
            await create_company(db.pool, slug="bench-shop", display_name="Bench Shop", hostnames=[HOST])
        except Conflict:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    ap.add_argument("--event-loop", default="auto", choices=["auto", "uvloop", "asyncio"], help="for every server")
    ap.add_argument("--no-front", action="store_true", help="serve the gateway without the front path")
    args = ap.parse_args()
    data_dir = tempfile.mkdtemp(prefix="ucpgw-discbench-", dir="/tmp")
    os.chmod(data_dir, 0o755)  # the embedded server may run as another user
    asyncio.run(_seed(data_dir, args.log_level))
    ctx = mp.get_context("spawn")
    gw_port, bare_port, only_port = _free_port(), _free_port(), _free_port()
    gateway = ctx.Process(
        target=_run_gateway, args=(gw_port, data_dir, args.log_level, args.event_loop, not args.no_front), daemon=True
    )
    gateway.start()
    try:
        asyncio.run(_wait_up(gw_port))
        body, etag = asyncio.run(_fetch(gw_port))
        bare = ctx.Process(target=_run_bare, args=(bare_port, body, etag, args.event_loop), daemon=True)
        bare.start()
        only = ctx.Process(
            target=_run_discovery_only, args=(only_port, data_dir, args.log_level, args.event_loop), daemon=True
        )
        only.start()
        try:
            asyncio.run(_wait_up(bare_port))
            asyncio.run(_wait_up(only_port))
            names = ("gateway", "component", "bare")
            results: dict[str, list[float]] = {n: [] for n in names}
            per_cpu: dict[str, list[float]] = {n: [] for n in names}
            pids = {"gateway": gateway.pid, "component": only.pid, "bare": bare.pid}
            ports = {"gateway": gw_port, "component": only_port, "bare": bare_port}
            for _ in range(args.rounds):  # interleaved, so background load hits all alike
                for name, port in ports.items():
                    asyncio.run(_load(port, 0.5, args.connections))  # warm-up
                    cpu0 = _cpu_seconds(pids[name])
                    rps, errors = asyncio.run(_load(port, args.seconds, args.connections))
                    cpu = _cpu_seconds(pids[name]) - cpu0
                    results[name].append(rps)
                    per_cpu[name].append(rps * args.seconds / cpu if cpu > 0 else float("nan"))
                    assert errors == 0, f"{name}: {errors} non-2xx answers"
            gw304, _ = asyncio.run(_load(gw_port, args.seconds, args.connections, f"If-None-Match: {etag}\r\n"))
        finally:
            for proc in (bare, only):
                proc.terminate()
                proc.join()
    finally:
        gateway.terminate()
        gateway.join()
        shutil.rmtree(data_dir, ignore_errors=True)  # the embedded server stopped with the gateway
    load = os.getloadavg()
    med = {k: statistics.median(v) for k, v in results.items()}
    cpu_med = {k: statistics.median(v) for k, v in per_cpu.items()}
    runs = {k: ", ".join(f"{x:.0f}" for x in v) for k, v in results.items()}
    print(f"profile size: {len(body)} bytes (company with 8 sub-agents), ETag {etag}")
    print(f"{args.connections} keep-alive connections, {args.seconds:.0f} s per run, {args.rounds} interleaved rounds")
    from ucp_gateway.config import Settings
    from ucp_gateway.serve import loop_factory

    factory = loop_factory(Settings(database_url="postgresql://unused/x", event_loop=args.event_loop))
    loop_name = "asyncio" if factory is None else factory.__module__.split(".")[0]
    print(f"gateway log level {args.log_level} (info writes one access-log line per request)")
    print(
        f"every server on the {loop_name} event loop (--event-loop {args.event_loop}); gateway served by"
        f" serve.run_server, front path {'off' if args.no_front else 'on'}"
    )
    print(f"gateway (run_server)      : median {med['gateway']:8.0f} req/s  ({runs['gateway']})")
    print(f"discovery component alone : median {med['component']:8.0f} req/s  ({runs['component']})")
    print(f"bare handler, same bytes  : median {med['bare']:8.0f} req/s  ({runs['bare']})")
    print(f"gateway 304 If-None-Match : {gw304:8.0f} req/s")
    print("requests per server CPU-second: " + ", ".join(f"{n} {cpu_med[n]:.0f}" for n in names))
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)")
    for n in ("gateway", "component"):
        wall = [a / b for a, b in zip(results[n], results["bare"], strict=True)]
        cpu = [a / b for a, b in zip(per_cpu[n], per_cpu["bare"], strict=True)]
        print(
            f"ratio {n}/bare: wall {med[n] / med['bare']:.2f} (per-round median {statistics.median(wall):.2f}:"
            f" {', '.join(f'{x:.2f}' for x in wall)}), per CPU-second {cpu_med[n] / cpu_med['bare']:.2f}"
            f" (per-round median {statistics.median(cpu):.2f}) (target >= 0.80)"
        )


if __name__ == "__main__":
    main()

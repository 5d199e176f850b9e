"""Instructions (or CPU) per ``GET /.well-known/ucp`` for gateway, gateway without the front path,
component, bare and bare + one no-op middleware, in one process over a fake transport: no sockets, no
client, so a count under callgrind is deterministic (about 0.5 % between runs) where wall-clock figures
on a shared machine swing by 30 %.

Each server is the same as in ``bench/discovery.py`` (real ``create_app`` on a real PostgreSQL); the
gateway has the front path installed as ``serve.run_server`` installs it (``serve.install_front`` on
its runner), ``gateway-mw`` is the same app without it. A request is fed to aiohttp's protocol with
``data_received`` and counts as done when the response is written (asyncio's event loop).

CPU per request (thread time, min over rounds; noisy on a busy machine)::

    python bench/discovery_inproc.py [--requests 20000] [--rounds 3]

Instructions per request (valgrind callgrind, instrumentation switched on only around the measured
requests; one server per run, about a minute each)::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
        python bench/discovery_inproc.py --only gateway --requests 2000 --callgrind
    # the script switches instrumentation on/off itself (callgrind_control); read "totals:" in
    # /tmp/cg.out and divide by --requests

Figures (instructions per request; the count includes about 1 % of callgrind_control overhead,
compare runs made the same way): branch perf-disc2: bare 205k, bare + no-op middleware 219k,
component 232k, gateway 269k before -> 245k after. Branch perf-disc3 (front path): main before
gateway 254k, bare 206k; after gateway 217k (front path), gateway-mw 248k, bare 208k.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

from ucp_gateway.serve import install_front

sys.path.insert(0, str(Path(__file__).parent))
import discovery as bench  # the servers and seeding of bench/discovery.py


class _Transport(asyncio.Transport):
    """Collects what the server writes; resolves ``done`` on each write (one write per response)."""

    def __init__(self) -> None:
        super().__init__()
        self.done: asyncio.Future[None] | None = None
        self.last = b""
        self._closing = False

    def write(self, data) -> None:
        self.last = bytes(data)
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def writelines(self, lines) -> None:
        self.write(b"".join(lines))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def _serve(app: web.Application, front: bool = False):
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    if front:  # as serve.run_server does
        assert install_front(runner), "the front path could not be installed"
    protocol = runner.server()
    transport = _Transport()
    protocol.connection_made(transport)
    return runner, protocol, transport


async def _drive(server, request: bytes, n: int) -> bytes:
    _, protocol, transport = server
    loop = asyncio.get_running_loop()
    for _ in range(n):
        transport.done = loop.create_future()
        protocol.data_received(request)
        await transport.done
    return transport.last


def _callgrind(on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], capture_output=True)
    time.sleep(2)  # callgrind reads the command between basic blocks; let it arrive before going on


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["gateway", "gateway-mw", "component", "bare", "bare+mw"])
    ap.add_argument("--callgrind", action="store_true", help="switch callgrind instrumentation around the run")
    args = ap.parse_args()
    from ucp_gateway.app import create_app
    from ucp_gateway.appkeys import CLOCK, DATABASE, SETTINGS
    from ucp_gateway.clock import SystemClock
    from ucp_gateway.discovery.web import setup
    from ucp_gateway.logs import configure_logging

    data_dir = tempfile.mkdtemp(prefix="ucpgw-inproc-", dir="/tmp")
    os.chmod(data_dir, 0o755)  # the embedded server may run as another user
    settings = bench._settings(data_dir, "warning")
    configure_logging(settings)
    await bench._seed(data_dir, "warning")
    request = f"GET /.well-known/ucp HTTP/1.1\r\nHost: {bench.HOST}\r\n\r\n".encode()
    servers = {"gateway": await _serve(create_app(settings), front=True)}
    first = await _drive(servers["gateway"], request, 1)
    # the same gateway without the front path (the foundation layer answers), on the same database
    servers["gateway-mw"] = await _serve(create_app(settings, database=servers["gateway"][0].app[DATABASE]))
    await _drive(servers["gateway-mw"], request, 1)
    component = web.Application()
    component[SETTINGS], component[CLOCK] = settings, SystemClock()
    component[DATABASE] = servers["gateway"][0].app[DATABASE]
    setup(component)
    servers["component"] = await _serve(component)
    await _drive(servers["component"], request, 1)
    head, _, body = first.partition(b"\r\n\r\n")
    etag = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])[b"ETag"].decode()

    async def handler(request: web.Request) -> web.Response:  # as bench/discovery.py's bare handler
        return web.Response(
            body=body, content_type="application/json", headers={"Cache-Control": "public, max-age=300", "ETag": etag}
        )

    @web.middleware
    async def noop(request: web.Request, handler):
        return await handler(request)

    for name, middlewares in (("bare", []), ("bare+mw", [noop])):
        app = web.Application(middlewares=middlewares)
        app.router.add_get("/.well-known/ucp", handler)
        servers[name] = await _serve(app)
    try:
        names = [args.only] if args.only else list(servers)
        for name in names:
            await _drive(servers[name], request, 500)  # warm-up
        if args.callgrind:
            _callgrind(True)
            await _drive(servers[names[0]], request, args.requests)
            _callgrind(False)
            print(f"{names[0]}: {args.requests} requests measured; divide callgrind's totals by it")
            return
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(args.rounds):
            for name in names:
                t0 = time.thread_time()
                await _drive(servers[name], request, args.requests)
                cpu[name].append((time.thread_time() - t0) / args.requests * 1e6)
        for name in names:
            print(f"{name:10s} min {min(cpu[name]):7.2f} us CPU/request ({', '.join(f'{x:.1f}' for x in cpu[name])})")
    finally:
        for runner, _, _ in reversed(list(servers.values())):
            await runner.cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

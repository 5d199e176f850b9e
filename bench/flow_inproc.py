"""CPU (or instructions) of the gateway per checkout flow, in one process over a fake transport.

The app is ``create_app`` as ``bench/checkout_flow.py`` runs it (same settings, embedded PostgreSQL,
the same seeded demo company and unsigned requests), fed with ``protocol.data_received`` (no client
sockets; PostgreSQL runs in its own processes and is not counted). Unsigned, the signature
middleware is left out and the company lets an unproven agent complete (``access.levels``), so every
flow places an order. One flow = create -> update -> complete, sent one after another, each with a
fresh Idempotency-Key, as the load generator does.
Modes: ``verbs`` (every call an audited verb dispatch) and ``plain`` (``commerce_via_verbs=false``).

CPU per flow (thread time of this process, min over rounds; noisy on a busy machine)::

    python bench/flow_inproc.py --mode verbs [--flows 300] [--rounds 3]

Instructions per flow (callgrind, instrumentation on only around the measured flows)::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
        python bench/flow_inproc.py --mode verbs --flows 100 --callgrind
    # read "totals:" in /tmp/cg.out (or callgrind_annotate) and divide by 3 * --flows for a request

A whole flow's count varies by about +-4 % between runs (the event loop's iterations and the
time-driven work depend on PostgreSQL's timing), so compare several runs; bench/verbs_pieces.py
counts the verb runtime's own steps deterministically.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import checkout_flow as cf  # the seeding, buyers and platform profiles of bench/checkout_flow.py
import discovery_inproc  # its in-memory transport


class _Transport(discovery_inproc._Transport):
    """bench/discovery_inproc.py's in-memory transport, but ``done`` resolves once a whole response
    (Content-Length) is in, with its bytes: checkout responses may take more than one write."""

    def __init__(self) -> None:
        super().__init__()
        self.buf = b""

    def write(self, data) -> None:
        self.buf += bytes(data)
        head, sep, body = self.buf.partition(b"\r\n\r\n")
        if not sep:
            return
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(body) >= length and self.done is not None and not self.done.done():
            self.done.set_result(self.buf)
            self.buf = b""


class _Client:
    def __init__(self, protocol, transport: _Transport, buyer: cf.Buyer, authority: str, sign: bool = False):
        self.protocol, self.transport, self.buyer, self.authority = protocol, transport, buyer, authority
        self.sign = sign

    async def call(self, method: str, path: str, body: bytes, key: str) -> dict:
        h = self.buyer.headers(method, self.authority, path, body, key, self.sign)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.authority}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in h.items()]
        self.transport.done = asyncio.get_running_loop().create_future()
        self.protocol.data_received(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        raw = await self.transport.done
        head, _, data = raw.partition(b"\r\n\r\n")
        if int(head[9:12]) >= 300:
            raise RuntimeError(f"{method} {path} -> {head[9:12]!r} {data[:300]!r}")
        return json.loads(data)


_CREATE = json.dumps({"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}).encode()
_UPDATE = json.dumps(cf.update_body("pot_ceramic")).encode()
_PAY = json.dumps(cf.PAY_BODY).encode()


async def _flows(c: _Client, n: int) -> None:
    for _ in range(n):
        co = await c.call("POST", "/ucp/v1/checkout-sessions", _CREATE, str(uuid.uuid4()))
        co = await c.call("PUT", f"/ucp/v1/checkout-sessions/{co['id']}", _UPDATE, str(uuid.uuid4()))
        done = await c.call("POST", f"/ucp/v1/checkout-sessions/{co['id']}/complete", _PAY, str(uuid.uuid4()))
        if done.get("status") != "completed":
            raise RuntimeError(f"flow not completed: {done}")


def _callgrind(on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], capture_output=True)
    time.sleep(2)  # callgrind reads the command between basic blocks; let it arrive before going on


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["verbs", "plain"], default="verbs")
    ap.add_argument("--signed", action="store_true", help="RFC 9421 verification on, signed requests (production)")
    ap.add_argument("--flows", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=50, help="flows run before measuring")
    ap.add_argument("--callgrind", action="store_true", help="switch callgrind instrumentation around the run")
    ap.add_argument("--profile", metavar="FILE", help="cProfile (thread time) the measured flows into FILE")
    args = ap.parse_args()
    from aiohttp import web

    import ucp_gateway.app as gateway_app
    from ucp_gateway.config import Settings
    from ucp_gateway.db.embedded import start_embedded, stop_embedded
    from ucp_gateway.logs import configure_logging
    from ucp_gateway.serve import install_front

    tmp = Path(tempfile.mkdtemp(prefix="ucpgw-flowinproc-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    server, dsn = await start_embedded(tmp / "pg")
    ring = "k1:" + base64.b64encode(os.urandom(32)).decode()
    for k in [k for k in os.environ if k.startswith("UCPGW_")]:
        del os.environ[k]
    os.environ.update(  # as bench/checkout_flow.py's gateway processes
        cf.gateway_env(dsn, ring, tmp),
        UCPGW_COMMERCE_VIA_VERBS="true" if args.mode == "verbs" else "false",
    )
    runner = platform = None
    try:
        await cf._prepare(dsn, ring, tmp / "keys", anonymous_complete=not args.signed)
        pport = cf._free_port()
        buyer = cf.Buyer(0, f"http://127.0.0.1:{pport}")
        platform = await cf._platform([buyer], pport)
        settings = Settings(host="127.0.0.1", port=8080)
        configure_logging(settings)
        if not args.signed:
            cf.without_signature_middleware(gateway_app.COMPONENTS)
        runner = web.AppRunner(gateway_app.create_app(settings), access_log=None)
        await runner.setup()
        install_front(runner)
        protocol = runner.server()
        transport = _Transport()
        protocol.connection_made(transport)
        client = _Client(protocol, transport, buyer, "127.0.0.1:8080", args.signed)
        await _flows(client, args.warmup)  # profile cache, prepared statements, pool
        if args.callgrind:
            _callgrind(True)
            await _flows(client, args.flows)
            _callgrind(False)
            print(f"{args.mode}: {args.flows} flows ({3 * args.flows} requests) measured")
            return
        if args.profile:
            import cProfile

            prof = cProfile.Profile(time.thread_time)
            prof.enable()
            await _flows(client, args.flows)
            prof.disable()
            prof.dump_stats(args.profile)
            return
        cpu = []
        for _ in range(args.rounds):
            t0 = time.thread_time()
            await _flows(client, args.flows)
            cpu.append((time.thread_time() - t0) / args.flows * 1e3)
        mode = args.mode + (" signed" if args.signed else "")
        print(f"{mode}: min {min(cpu):.3f} ms CPU/flow ({', '.join(f'{x:.3f}' for x in cpu)})")
    finally:
        if runner is not None:
            await runner.cleanup()
        if platform is not None:
            await platform.cleanup()
        await stop_embedded(server)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:  # the gateway's loop under `serve` (auto: uvloop when installed)
        import uvloop
    except ImportError:
        uvloop = None
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if uvloop else None) as r:
        r.run(main())

"""Transport benchmark: one READ verb (customer.context) through three doors of a real gateway on a
real socket, with the full middleware stack (request id, errors, tenancy, RFC 9421 layer, keys):

- http:    POST /api/v1/agent/dispatch                 (staff bearer token)
- ucp-mcp: POST /ucp/mcp  JSON-RPC tools/call          (staff bearer token)
- webmcp:  POST /api/v1/webmcp/execute/{tool}          (session cookie + CSRF)

Prints requests/s and p50/p99 latency per door; the MCP overhead is the difference to http.

Usage: python bench/transports.py [--n 1000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from ucp_gateway.app import create_app
from ucp_gateway.config import Settings
from ucp_gateway.db import open_database, tenant_tx
from ucp_gateway.demo import seed_demo
from ucp_gateway.logs import configure_logging
from ucp_gateway.transports.sessions import COOKIE_NAME
from ucp_gateway.verbs.auth import issue_staff_token

ARGS = {"customer_id": "cust_1"}


async def _measure(name: str, n: int, concurrency: int, send) -> None:
    for _ in range(50):
        await send()
    lat: list[float] = []
    todo = iter(range(n))

    async def worker() -> None:
        for _ in todo:
            t = time.perf_counter()
            await send()
            lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    lat.sort()
    p50, p99 = statistics.median(lat) * 1000, lat[int(len(lat) * 0.99) - 1] * 1000
    print(f"{name:8} {n / wall:8.0f} req/s   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   (n={n}, c={concurrency})")


async def run(n: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), environment="development", log_level="warning",
                            db_pool_min=concurrency, db_pool_max=concurrency, verbs_nonce_secret="b" * 32,
                            webhook_worker=False, keys_dir=Path(tmp) / "keys")  # fmt: skip
        configure_logging(settings)
        async with open_database(settings) as db:
            company = (await seed_demo(db, settings)).company
            async with tenant_tx(db.pool, company.id) as conn:  # bearer tokens, no request signatures
                await conn.execute("UPDATE companies SET signature_policy = 'optional' WHERE id = $1", company.id)
            token = await issue_staff_token(db.pool, company.id, "read_only", "bench")
            app = create_app(settings, database=db)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
            auth = {"Authorization": f"Bearer {token}"}
            conn = aiohttp.TCPConnector(limit=concurrency)
            async with aiohttp.ClientSession(connector=conn) as http:
                async with http.post(base + "/api/v1/webmcp/session", headers=auth) as r:
                    csrf = (await r.json())["csrf_token"]
                    cookie = r.cookies[COOKIE_NAME].value

                async def via_http():
                    body = {"verb": "customer.context", "args": ARGS}
                    async with http.post(base + "/api/v1/agent/dispatch", json=body, headers=auth) as r:
                        assert (await r.json())["ok"]

                async def via_mcp():
                    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                        "name": "customer__context", "arguments": ARGS}}  # fmt: skip
                    async with http.post(base + "/ucp/mcp", json=body, headers=auth) as r:
                        assert (await r.json())["result"]["structuredContent"]["ok"]

                async def via_webmcp():
                    body = {"input": ARGS, "surface": "dashboard"}
                    h = {"Cookie": f"{COOKIE_NAME}={cookie}", "X-CSRF-Token": csrf}
                    async with http.post(base + "/api/v1/webmcp/execute/customer__context", json=body, headers=h) as r:
                        assert (await r.json())["ok"]

                for name, fn in (("http", via_http), ("ucp-mcp", via_mcp), ("webmcp", via_webmcp)):
                    await _measure(name, n, concurrency, fn)
            await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    asyncio.run(run(a.n, a.concurrency))


if __name__ == "__main__":
    main()

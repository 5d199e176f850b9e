"""Dispatcher benchmark: READ-verb dispatches per second end to end (gates, handler, audit row in
the same transaction), with p50/p99 latency, on the embedded PostgreSQL of this machine.

Each dispatch = decide() + one tenant transaction (SET LOCAL tenant, the verb's queries, the
hash-chained audit append) + shape validation of the output. Target: >= 1,000 dispatches/s.

Usage: python bench/dispatch.py [--n 5000] [--concurrency 16] [--verb capability.manifest]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from ucp_gateway.clock import SystemClock
from ucp_gateway.config import Settings
from ucp_gateway.db import open_database, tenant_tx
from ucp_gateway.demo import seed_demo
from ucp_gateway.verbs import Call, Dispatcher, Principal, build_registry
from ucp_gateway.verbs.audit import verify_chain

VERB_ARGS = {
    "capability.manifest": {},
    "customer.context": {"customer_id": "cust_1"},
    "orders.explain_total": {"order_id": "ord_1"},
}


async def run(verb: str, n: int, concurrency: int, pool_max: int, validate: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            environment="production",
            log_level="warning",
            db_pool_min=pool_max,
            db_pool_max=pool_max,
            verbs_nonce_secret="b" * 32,
            verbs_validate_output=validate,
        )
        async with open_database(settings) as db:
            company = (await seed_demo(db, settings)).company
            d = Dispatcher(build_registry(), db.pool, settings, SystemClock())
            p = Principal("staff", company.id, "read_only", "bench", "http")
            call = Call(verb, VERB_ARGS[verb])
            for _ in range(200):  # warm-up: connections, prepared statements, schema validators
                assert (await d.dispatch(p, call, company=company))["ok"]
            lat: list[float] = []
            todo = iter(range(n))

            async def worker() -> None:
                for _ in todo:
                    t = time.perf_counter()
                    env = await d.dispatch(p, call, company=company)
                    lat.append(time.perf_counter() - t)
                    assert env["ok"], env

            t0 = time.perf_counter()
            await asyncio.gather(*[worker() for _ in range(concurrency)])
            wall = time.perf_counter() - t0
            async with tenant_tx(db.pool, company.id) as conn:
                rep = await verify_chain(conn, company.id)
    lat.sort()
    print(f"verb={verb} n={n} concurrency={concurrency} pool={pool_max} output_validation={validate}")
    print(f"  throughput: {n / wall:,.0f} dispatches/s (wall {wall:.2f} s)")
    print(f"  latency: p50 {statistics.median(lat) * 1000:.2f} ms, p99 {lat[int(len(lat) * 0.99) - 1] * 1000:.2f} ms")
    print(f"  audit chain: {'intact' if rep.ok else 'BROKEN'} ({rep.rows} rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--pool", type=int, default=8)
    ap.add_argument("--verb", choices=sorted(VERB_ARGS), default="capability.manifest")
    ap.add_argument("--validate-output", action="store_true", help="also validate each result (dev default)")
    args = ap.parse_args()
    asyncio.run(run(args.verb, args.n, args.concurrency, args.pool, args.validate_output))


if __name__ == "__main__":
    main()

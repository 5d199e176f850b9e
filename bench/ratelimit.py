"""Rate limit benchmark: per-request cost of the shared limiter (access/ratelimit.py) on a real
PostgreSQL, next to its floor.

Prints, per ``SharedLimiter.take`` (wall and event-loop CPU, microseconds):
  leased   one busy principal (a hot key): most takes spend a local lease, a few ask the database;
           with the round trips per take;
  upsert   every take asks the database (leases off): the one-statement upsert in its tenant
           transaction, the cost of a cold key (a principal's first request in 2 s);
  floor    a dict lookup and a decrement, what an in-process counter costs.
The limit is set high enough that nothing is refused. Uses an embedded PostgreSQL in a temporary
directory. Usage: python bench/ratelimit.py [--seconds S] [--concurrency N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ucp_gateway.access.ratelimit import SharedLimiter
from ucp_gateway.config import Settings
from ucp_gateway.db.database import open_database
from ucp_gateway.keys import KekRing
from ucp_gateway.logs import configure_logging
from ucp_gateway.tenancy import create_company

LIMIT = 10**7  # a minute: never refused here


async def _run(lim: SharedLimiter, pool, company_id, seconds: float, concurrency: int) -> tuple[float, float, int]:
    n, w0, c0 = 0, time.perf_counter(), time.thread_time()
    stop = w0 + seconds

    async def worker() -> None:
        nonlocal n
        while time.perf_counter() < stop:
            assert await lim.take(pool, company_id, "p:https://platform.example/profile.json", LIMIT) == 0.0
            n += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.perf_counter() - w0) / n * 1e6, (time.thread_time() - c0) / n * 1e6, n


async def main(seconds: float, concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), environment="development", log_level="error",
                            kek_ring=KekRing.new_entry("bench"), keys_dir=Path(tmp) / "keys")  # fmt: skip
        configure_logging(settings)
        async with open_database(settings) as db:
            company = await create_company(db.pool, slug="shop", display_name="Shop", hostnames=["shop.example"])
            leased = SharedLimiter()
            await _run(leased, db.pool, company.id, 0.2, concurrency)  # warm: the lease grows to its cap
            leased.db_calls = 0
            l_wall, l_cpu, l_n = await _run(leased, db.pool, company.id, seconds, concurrency)
            upsert = SharedLimiter(lease_ttl=0, refusal_ttl=0)
            u_wall, u_cpu, _ = await _run(upsert, db.pool, company.id, seconds, concurrency)
    table = {("c", "k"): [10**9]}
    c0, m = time.thread_time(), 200_000
    for _ in range(m):
        table[("c", "k")][0] -= 1
    floor = (time.thread_time() - c0) / m * 1e6
    print(f"leased (hot key)        : {l_wall:8.1f} us wall, {l_cpu:7.2f} us event-loop CPU a take; "
          f"{leased.db_calls / l_n:.3f} round trips a take (lease cap 32)")  # fmt: skip
    print(f"upsert (every take)     : {u_wall:8.1f} us wall, {u_cpu:7.2f} us event-loop CPU a take")
    print(f"floor (dict + decrement): {floor:8.3f} us")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    asyncio.run(main(a.seconds, a.concurrency))

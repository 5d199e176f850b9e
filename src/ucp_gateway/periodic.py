"""Periodic platform jobs (the key scheduler, the retention sweeper): the pieces they share.

The rule every per-company background job follows (docs/architecture.md, "Background work"): its
cost grows with what is due, not with how many companies exist.

1. **Find** what is due in one set-based read over all companies (:func:`due_scan`): a platform
   transaction under the job's scan scope, as the role ``ucp_scan`` (migration 0090), which sees
   only the columns saying which company has what due, through an index on the due time. A
   company with nothing due costs nothing.
2. **Act** per company in its tenant transaction (RLS forced as for a request), in bounded
   batches, short transactions that never wait on a lock a request holds (``lock_timeout``,
   ``SKIP LOCKED``).
3. **Bound** the round (:class:`Budget`: seconds and items); between transactions the round
   yields, and waits while the pool has no idle connection (requests first). What it left is
   reported (:class:`Round`) and the next round goes on from there.

A job runs in every replica; :func:`one_replica` lets one of them act per round (a PostgreSQL
session advisory lock, ``pg_try_advisory_lock``: the others skip the round), and :func:`every`
runs the rounds until cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from .db import platform_scan_tx
from .errors import GatewayError

__all__ = ["LOCK_TIMEOUT", "SCAN_ROLE", "Budget", "Round", "due_scan", "every", "one_replica"]

#: The role a due-work read runs as (migration 0090): column SELECT on due times only.
SCAN_ROLE = "ucp_scan"
#: The first statement of a job's tenant transaction: a row a request holds is left for the next
#: round rather than waited on (the transaction fails with LockNotAvailableError).
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '200ms'"
#: How long a round waits for an idle pool connection before each transaction, seconds (then it
#: goes on: a saturated pool must not stall the background work for ever).
_YIELD_MAX = 0.5
_YIELD_STEP = 0.01


@dataclass(slots=True)
class Budget:
    """One round's limits: ``seconds`` of wall time and ``items`` acted on (a company, or one table of
    a company: a tenant transaction or a few), on the monotonic clock.

    :meth:`pace` before each transaction yields to request traffic; :meth:`spent` says when to stop."""

    seconds: float = 5.0
    items: int = 1000
    started: float = field(default_factory=time.monotonic)
    used: int = 0  # items acted on so far

    def spent(self) -> bool:
        return self.used >= self.items or time.monotonic() - self.started >= self.seconds

    def take(self) -> bool:
        """Count one more item acted on; False (and nothing counted) once the budget is spent."""
        if self.spent():
            return False
        self.used += 1
        return True

    async def pace(self, pool: asyncpg.Pool) -> None:
        """Yield to the event loop; while every pool connection is busy (requests), wait a little
        (at most ``_YIELD_MAX`` seconds), so a round takes a connection only when one is spare."""
        await asyncio.sleep(0)
        waited = 0.0
        while waited < _YIELD_MAX and pool.get_idle_size() == 0 and pool.get_size() >= pool.get_max_size():
            await asyncio.sleep(_YIELD_STEP)
            waited += _YIELD_STEP


@dataclass(slots=True)
class Round:
    """What one round did and left. ``done``: ``{slug: what happened}`` for companies where
    something happened; ``left``: how many due items (companies, or tables of a company) the
    round found and left for the next round (budget spent, or a row a request held); a lower
    bound once the budget is spent, as a round reads only a little past what it may take;
    ``seconds``: the round's wall time."""

    done: dict[str, Any] = field(default_factory=dict)
    left: int = 0
    seconds: float = 0.0


async def due_scan(pool: asyncpg.Pool, scope: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """The rows of ``sql`` (a read of constant text; ``args`` its parameters) run across all
    companies in one platform transaction under ``scope``, as :data:`SCAN_ROLE`: it sees the
    columns migration 0090 grants, of the tables whose policy names ``scope``."""
    async with platform_scan_tx(pool, scope, role=SCAN_ROLE) as conn:
        return list(await conn.fetch(sql, *args))


@asynccontextmanager
async def one_replica(pool: asyncpg.Pool, lock_key: int) -> AsyncIterator[asyncpg.Connection | None]:
    """The connection holding the advisory lock ``lock_key`` (a 63-bit integer) for the block, or
    None when another replica holds it (skip the round). The lock is released on the way out."""
    async with pool.acquire() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", lock_key):
            yield None
            return
        try:
            yield conn
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", lock_key)


async def every(interval: float, round_: Callable[[], Awaitable[Any]], *, what: str, log: logging.Logger) -> None:
    """Await ``round_()`` every ``interval`` seconds (the first after a random 50-100 % of it, so
    replicas started together spread out) until cancelled. A round's database, network or gateway
    error is logged as ``"<what> failed: <class name>"`` (never its text) and the next round tries again."""
    await asyncio.sleep(interval * (0.5 + random.random() / 2))
    while True:
        try:
            await round_()
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError, GatewayError) as exc:
            log.warning("%s failed: %s", what, exc.__class__.__name__)
        await asyncio.sleep(interval)  # cancellation ends the loop

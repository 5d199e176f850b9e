"""Periodic platform jobs (the key scheduler, the retention sweeper): the pieces they share.

A job runs in every replica; :func:`one_replica` lets one of them act per round (a PostgreSQL
session advisory lock, ``pg_try_advisory_lock``: the others skip the round), :func:`all_companies`
walks the directory, and :func:`every` runs the rounds until cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from .errors import GatewayError
from .tenancy import Company, list_companies

__all__ = ["all_companies", "every", "one_replica"]


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


async def all_companies(pool: asyncpg.Pool, *, page: int = 200) -> AsyncIterator[Company]:
    """Every company, by slug, read ``page`` at a time (keyset pagination)."""
    after = None
    while batch := await list_companies(pool, after_slug=after, limit=page):
        for company in batch:
            yield company
        after = batch[-1].slug


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

"""The key scheduler: advances time-driven key transitions for every company.

It runs in every replica; a PostgreSQL session advisory lock makes one replica act at a time
(``pg_try_advisory_lock``: the others skip the round). Also purges expired replay-cache rows.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from collections.abc import Callable

import asyncpg

from ..errors import GatewayError
from ..tenancy import list_companies
from .repository import Vault, advance_company, ensure_active_key, has_active_key

__all__ = ["LOCK_KEY", "run_forever", "run_once"]

log = logging.getLogger(__name__)

#: Advisory lock id: "ucpgwkey" as a 63-bit integer.
LOCK_KEY = int.from_bytes(b"ucpgwkey", "big") & 0x7FFF_FFFF_FFFF_FFFF


async def run_once(
    pool: asyncpg.Pool, *, now: dt.datetime, publish_min: int, rotating_grace: int, vault: Vault | None = None
) -> dict[str, list[tuple[str, str]]] | None:
    """One round over all companies. Returns ``{slug: [(kid, event), ...]}`` for companies where
    something happened, or None if another replica holds the lock. With a ``vault``, a company
    with no active key gets its first one (so it is published before it is first needed)."""
    async with pool.acquire() as lock_conn:
        if not await lock_conn.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY):
            return None
        try:
            out: dict[str, list[tuple[str, str]]] = {}
            after = None
            while True:
                batch = await list_companies(pool, after_slug=after, limit=200)
                if not batch:
                    break
                for c in batch:
                    if vault is not None and not await has_active_key(pool, c.id):
                        kid = await ensure_active_key(pool, c.id, now=now, vault=vault)
                        out.setdefault(c.slug, []).append((kid, "create"))
                    done = await advance_company(
                        pool, c.id, now=now, publish_min=publish_min, rotating_grace=rotating_grace
                    )
                    if done:
                        out.setdefault(c.slug, []).extend((kid, ev.value) for kid, ev in done)
                after = batch[-1].slug
            await lock_conn.execute("DELETE FROM signature_nonces WHERE expires_at <= $1", now)
            return out
        finally:
            await lock_conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)


async def run_forever(
    pool: asyncpg.Pool,
    *,
    now: Callable[[], dt.datetime],
    interval: float,
    publish_min: int,
    rotating_grace: int,
    vault: Vault | None = None,
) -> None:
    """Run :func:`run_once` every ``interval`` seconds (first after a random 50-100 % of it, so
    replicas started together spread out) until cancelled; errors are logged, not fatal."""
    await asyncio.sleep(interval * (0.5 + random.random() / 2))
    while True:
        try:
            done = await run_once(pool, now=now(), publish_min=publish_min, rotating_grace=rotating_grace, vault=vault)
            if done:
                log.info("key transitions", extra={"transitions": done})
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError, GatewayError) as exc:
            log.warning("key scheduler round failed: %s", exc.__class__.__name__)
        await asyncio.sleep(interval)  # cancellation ends the loop

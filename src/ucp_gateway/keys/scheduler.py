"""The key scheduler: advances time-driven key transitions for every company.

It runs in every replica; one replica acts per round (:mod:`ucp_gateway.periodic`: a session
advisory lock, the others skip the round). Also purges expired replay-cache rows.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

import asyncpg

from ..periodic import all_companies, every, one_replica
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
    async with one_replica(pool, LOCK_KEY) as lock_conn:
        if lock_conn is None:
            return None
        out: dict[str, list[tuple[str, str]]] = {}
        async for c in all_companies(pool):
            if vault is not None and not await has_active_key(pool, c.id):
                kid = await ensure_active_key(pool, c.id, now=now, vault=vault)
                out.setdefault(c.slug, []).append((kid, "create"))
            done = await advance_company(pool, c.id, now=now, publish_min=publish_min, rotating_grace=rotating_grace)
            if done:
                out.setdefault(c.slug, []).extend((kid, ev.value) for kid, ev in done)
        await lock_conn.execute("DELETE FROM signature_nonces WHERE expires_at <= $1", now)
        return out


async def run_forever(
    pool: asyncpg.Pool,
    *,
    now: Callable[[], dt.datetime],
    interval: float,
    publish_min: int,
    rotating_grace: int,
    vault: Vault | None = None,
) -> None:
    """Run :func:`run_once` every ``interval`` seconds until cancelled (:func:`..periodic.every`:
    the first after a random 50-100 % of it; errors are logged, not fatal)."""

    async def round_() -> None:
        done = await run_once(pool, now=now(), publish_min=publish_min, rotating_grace=rotating_grace, vault=vault)
        if done:
            log.info("key transitions", extra={"transitions": done})

    await every(interval, round_, what="key scheduler round", log=log)

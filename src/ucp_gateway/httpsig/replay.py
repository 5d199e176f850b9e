"""Replay cache on ``(keyid, nonce)`` (RFC 9421 §7.2.2, §3.2.1).

Never keyed on signature bytes: ECDSA ``(r, n-s)`` is a second valid signature over the same base.
The PostgreSQL store is shared by every replica (table ``signature_nonces``, migration 0011).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Protocol

import asyncpg

from ..db import platform_tx

__all__ = ["MemoryReplayStore", "PgReplayStore", "ReplayStore", "remember_on"]


class ReplayStore(Protocol):
    async def remember(self, keyid: str, nonce: str, *, now: dt.datetime, ttl: int) -> bool:
        """Record ``(keyid, nonce)`` until ``now + ttl`` seconds. True if new, False if a replay."""
        ...


class MemoryReplayStore:
    """Single-process store (one replica, dev). Same semantics as :class:`PgReplayStore`."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], dt.datetime] = {}

    async def remember(self, keyid: str, nonce: str, *, now: dt.datetime, ttl: int) -> bool:
        until = self._seen.get((keyid, nonce))
        if until is not None and until > now:
            return False
        self._seen[(keyid, nonce)] = now + dt.timedelta(seconds=ttl)
        if len(self._seen) > 100_000:
            self._seen = {k: v for k, v in self._seen.items() if v > now}
        return True


_REMEMBER = """
INSERT INTO signature_nonces (keyid, nonce, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (keyid, nonce) DO UPDATE SET expires_at = EXCLUDED.expires_at
    WHERE signature_nonces.expires_at <= $4
RETURNING 1
"""


async def remember_on(conn: asyncpg.Connection, keyid: str, nonce: str, *, now: dt.datetime, ttl: int) -> bool:
    """:meth:`PgReplayStore.remember` on a connection the caller holds (in its transaction, so
    the record commits or rolls back with the caller's other writes)."""
    return await conn.fetchval(_REMEMBER, keyid, nonce, now + dt.timedelta(seconds=ttl), now) is not None


class PgReplayStore:
    """Shared replay cache. An expired row may be reused; otherwise the insert is refused."""

    def __init__(self, pool: asyncpg.Pool, *, purge_probability: float = 0.01):
        self._pool = pool
        self._purge_p = purge_probability

    async def remember(self, keyid: str, nonce: str, *, now: dt.datetime, ttl: int) -> bool:
        async with platform_tx(self._pool) as conn:
            fresh = await remember_on(conn, keyid, nonce, now=now, ttl=ttl)
            if random.random() < self._purge_p:  # amortised cleanup, no extra job needed
                await conn.execute("DELETE FROM signature_nonces WHERE expires_at <= $1", now)
        return fresh

    async def purge(self, now: dt.datetime) -> int:
        """Delete expired rows; returns how many."""
        async with platform_tx(self._pool) as conn:
            res = await conn.execute("DELETE FROM signature_nonces WHERE expires_at <= $1", now)
        return int(res.split()[-1])

"""Rate limits shared by every process and replica on one database: a token bucket per (company,
bucket) in PostgreSQL, spent through small local leases.

The bucket is GCRA (the generic cell rate algorithm, a token bucket kept as one timestamp): a limit
of ``limit`` requests a minute is one token per ``T = 60 / limit`` seconds with a burst of
``limit``; the row keeps the theoretical arrival time ``tat``. ``n`` tokens are free at ``now`` when
``greatest(tat, now) + n * T <= now + 60``. A buyer may spend the whole minute's budget in one burst,
then one request per ``T``. The row lives in an UNLOGGED table (``rate_limit_buckets``, migration
0106; counters are not worth a WAL write, and a crash only forgets them), updated by one upsert
that grants up to the asked number of tokens and says how long until the next one is free.
Time is PostgreSQL's clock (``clock_timestamp()``), one clock for every replica.

Leases: a process asks for more than one token at a time once a key is busy (1, then twice the last
lease while leases are spent within ``lease_ttl``, at most ``lease_cap(limit)``, 1/50 of the limit
and 32) and spends them locally, with no database round trip, for at most ``lease_ttl`` seconds
(2 s); what is left then is dropped, never returned. Error bound, stated: every request served
was counted in the shared row before it was served, so over any ``t`` seconds at most ``limit *
(1 + (t + lease_ttl) / 60)`` requests pass across all replicas (the bucket's own bound is ``limit *
(1 + t / 60)``); and a request is refused early by at most the unspent leases other processes hold,
fewer than ``lease_cap(limit)`` tokens each (24 of 1,200 by default). A refusal is remembered
locally for ``min(wait, refusal_ttl)`` (0.25 s), so a flood of refused requests costs no round trip
each. A database error propagates (503 ``unavailable`` through the bindings).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from ..db import tenant_tx

__all__ = ["LEASE_MAX", "LEASE_TTL", "REFUSAL_TTL", "WINDOW", "SharedLimiter", "gcra", "lease_cap"]

WINDOW = 60.0  # seconds: limits are per minute, and a full bucket holds a minute's tokens
LEASE_TTL = 2.0  # seconds a leased token may be spent locally
LEASE_MAX = 32
REFUSAL_TTL = 0.25  # seconds a refusal is answered locally
MAX_KEYS = 20_000  # local lease entries per process (expired ones are dropped first)
_MIN_WAIT = 0.001

# $1 company, $2 bucket, $3 tokens asked, $4 limit, $5 T (seconds a token), $6 now (NULL: the server's)
_GRANT = """
INSERT INTO rate_limit_buckets AS b (company_id, bucket, tat, seen_at, granted)
SELECT $1, $2, c.n + make_interval(secs => least($3::int, $4::int) * $5::float8), c.n, least($3::int, $4::int)
FROM (SELECT coalesce($6::timestamptz, clock_timestamp()) AS n) AS c
ON CONFLICT (company_id, bucket) DO UPDATE SET
    granted = greatest(0, least($3::int, floor(
        extract(epoch FROM EXCLUDED.seen_at - greatest(b.tat, EXCLUDED.seen_at)) / $5::float8 + $4::int + 1e-9)))::int,
    tat = greatest(b.tat, EXCLUDED.seen_at) + make_interval(secs => $5::float8 * greatest(0, least($3::int, floor(
        extract(epoch FROM EXCLUDED.seen_at - greatest(b.tat, EXCLUDED.seen_at)) / $5::float8 + $4::int + 1e-9)))),
    seen_at = EXCLUDED.seen_at
RETURNING granted, extract(epoch FROM tat - seen_at)::float8 AS ahead
"""


def lease_cap(limit: int, lease_max: int = LEASE_MAX) -> int:
    """The most tokens one lease may take for a bucket of ``limit`` a minute: 1/50 of it, at most
    ``lease_max``, at least 1."""
    return max(1, min(lease_max, limit // 50))


def gcra(tat: float, now: float, limit: int, want: int) -> tuple[int, float, float]:
    """The grant of the upsert, in Python (the reference the SQL is tested against).

    Args: ``tat`` and ``now`` in seconds (any epoch); ``limit`` per minute (>= 1); ``want`` >= 1.
    Returns ``(granted, new tat, wait)``: ``wait`` the seconds until one token is free when none
    was granted (else 0.0).
    """
    t = WINDOW / limit
    start = max(tat, now)
    free = int((now - start) / t + limit + 1e-9)
    granted = max(0, min(want, free))
    new = start + granted * t
    return granted, new, 0.0 if granted else max(new - now + t - WINDOW, _MIN_WAIT)


@dataclass(slots=True)
class _Lease:
    left: int = 0  # tokens still to spend here
    until: float = 0.0  # monotonic: the lease ends
    size: int = 0  # tokens the grant asked for
    refused_until: float = 0.0  # monotonic: refused locally until then
    free_at: float = 0.0  # monotonic: when the refusal's bucket frees a token


class SharedLimiter:
    """Token buckets per ``(company id, bucket)`` in PostgreSQL, with local leases (module doc).

    Args:
        lease_ttl: seconds a leased token may be spent here (0: every request asks the database).
        lease_max: the largest lease.
        refusal_ttl: seconds a refusal is answered locally (0: never).
        clock: the monotonic clock of the leases (tests pass their own).
    ``db_calls`` counts the upserts (for the benchmark and tests).
    """

    def __init__(
        self,
        *,
        lease_ttl: float = LEASE_TTL,
        lease_max: int = LEASE_MAX,
        refusal_ttl: float = REFUSAL_TTL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.lease_ttl, self.lease_max, self.refusal_ttl = lease_ttl, lease_max, refusal_ttl
        self._clock = clock
        self._leases: dict[tuple[Any, str], _Lease] = {}
        self._inflight: dict[tuple[Any, str], asyncio.Future[None]] = {}
        self.db_calls = 0

    def _local(self, key: tuple[Any, str], now: float) -> float | None:
        """0.0 when a leased token was spent, the wait of a remembered refusal, else None."""
        lease = self._leases.get(key)
        if lease is None:
            return None
        if lease.left > 0 and now < lease.until:
            lease.left -= 1
            return 0.0
        if now < lease.refused_until:
            return max(lease.free_at - now, _MIN_WAIT)
        return None

    def _want(self, key: tuple[Any, str], now: float, limit: int) -> int:
        lease = self._leases.get(key)
        cap = lease_cap(limit, self.lease_max)
        if lease is None or lease.size == 0:
            return 1
        if lease.left == 0 and now < lease.until:  # spent within its life: the key is busy
            return min(cap, lease.size * 2)
        return max(1, min(cap, lease.size - lease.left))  # what one lease's life used

    async def take(
        self, pool: asyncpg.Pool, company_id: Any, bucket: str, limit: int, *, at: dt.datetime | None = None
    ) -> float:
        """Spend one token of ``bucket`` (a limit of ``limit`` >= 1 requests a minute) at
        ``company_id``. Returns 0.0 when allowed, else the seconds until a token is free (> 0).
        ``at``: the database's time to count at (tests); None: its clock. Raises asyncpg and pool
        errors as they come (the caller answers 503)."""
        key = (company_id, bucket)
        for _ in range(3):  # another request of this process may be asking for this key right now
            local = self._local(key, self._clock())
            if local is not None:
                return local
            pending = self._inflight.get(key)
            if pending is None:
                break
            await asyncio.shield(pending)
        now = self._clock()
        want = self._want(key, now, limit)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = done
        try:
            async with tenant_tx(pool, company_id) as conn:
                row = await conn.fetchrow(_GRANT, company_id, bucket, want, limit, WINDOW / limit, at)
            self.db_calls += 1
        finally:
            if self._inflight.get(key) is done:
                del self._inflight[key]
            done.set_result(None)
        granted, ahead = row["granted"], row["ahead"]
        now = self._clock()
        if len(self._leases) >= MAX_KEYS:
            self._prune(now)
        if granted > 0:
            self._leases[key] = _Lease(left=granted - 1, until=now + self.lease_ttl, size=want)
            return 0.0
        wait = max(ahead + WINDOW / limit - WINDOW, _MIN_WAIT)
        self._leases[key] = _Lease(refused_until=now + min(wait, self.refusal_ttl), free_at=now + wait)
        return wait

    def _prune(self, now: float) -> None:
        self._leases = {k: v for k, v in self._leases.items() if now < v.until or now < v.refused_until}
        if len(self._leases) >= MAX_KEYS:  # all live: forget them (unspent tokens are only lost)
            self._leases.clear()

"""The order-webhook queue: fair leases, fenced records, dead letters, and what metrics read.

``webhook_queue`` holds one row per undelivered event (ids, receiver and due time; migration 0080);
``webhook_outbox`` the event itself (tenant rows). The delivery worker (:mod:`.webhooks`) works on
both through these functions.

Leases (:func:`lease`): one statement walks the receivers that have something due (a loose index
scan of ``(receiver, next_attempt_at)``), takes at most ``room`` of the oldest due events of each
(``per_receiver`` less what this process already has in flight for it), and of those at most
``limit``, the first of every receiver before the second of any (round-robin), moving their due
time to the lease's end. A slow or dead receiver thus holds only its own events, never another's.
Two processes racing for one row: the second's UPDATE re-reads it after the first commits and
skips it (its due time is no longer <= now), so a row has one lessee.

Fencing: the lease's end is the row's ``next_attempt_at``, and a lessee names it in every later
write (:func:`renew`, :func:`reschedule`, :func:`dead_letter`): a late worker whose lease was
taken over changes nothing. Its success (:func:`delivered`) is always recorded: the event was
delivered. The worker renews before it sends when less than one attempt's time is left, so a
lease never runs out during a POST and no second worker sends the same event meanwhile
(at-least-once; a duplicate only after a crash between the POST and its record).

Retry delays (:func:`retry_delay`): exponential backoff with "equal jitter", ``d/2 + U(0, d/2)``
for ``d = min(cap, base * 2**(attempt-1))``, so receivers that failed together do not retry in step.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from ..db import platform_scan_tx, tenant_tx

__all__ = [
    "QueueStats",
    "dead_letter",
    "dead_letters",
    "delivered",
    "lease",
    "queue_stats",
    "renew",
    "requeue",
    "reschedule",
    "retry_delay",
]

SCOPE = "webhook_queue"  # the platform_scan_tx scope of the queue's policy (migration 0040)

_LEASE = """
WITH RECURSIVE rs AS (
    (SELECT receiver FROM webhook_queue WHERE next_attempt_at <= $1 ORDER BY receiver LIMIT 1)
    UNION ALL
    SELECT (SELECT q.receiver FROM webhook_queue q WHERE q.receiver > rs.receiver AND q.next_attempt_at <= $1
            ORDER BY q.receiver LIMIT 1)
    FROM rs WHERE rs.receiver IS NOT NULL
), room AS (
    SELECT r.receiver, r.room FROM unnest($4::text[], $5::int[]) AS r(receiver, room)
), pick AS (
    SELECT d.company_id, d.event_id FROM rs
    LEFT JOIN room ON room.receiver = rs.receiver
    CROSS JOIN LATERAL (
        SELECT q.company_id, q.event_id, q.next_attempt_at, row_number() OVER (ORDER BY q.next_attempt_at) AS rn
        FROM webhook_queue q WHERE q.receiver = rs.receiver AND q.next_attempt_at <= $1
        ORDER BY q.next_attempt_at LIMIT greatest(coalesce(room.room, $6), 0)
    ) d
    WHERE rs.receiver IS NOT NULL
    ORDER BY d.rn, d.next_attempt_at LIMIT $3
)
UPDATE webhook_queue q SET next_attempt_at = $2 FROM pick
WHERE q.company_id = pick.company_id AND q.event_id = pick.event_id AND q.next_attempt_at <= $1
RETURNING q.company_id, q.event_id, q.receiver
"""


def retry_delay(attempt: int, base: float, cap: float, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry number ``attempt`` (1-based): backoff with equal jitter (module doc),
    in ``[d/2, d]`` for ``d = min(cap, base * 2**(attempt-1))``."""
    d = min(cap, base * (2 ** max(0, attempt - 1)))
    return d / 2 + (d / 2) * rand()


async def lease(
    pool: asyncpg.Pool,
    *,
    now: datetime,
    until: datetime,
    limit: int,
    per_receiver: int,
    busy: dict[str, int],
) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
    """Lease up to ``limit`` due events until ``until``, at most ``per_receiver - busy[r]`` of
    receiver ``r`` (module doc). Returns ``[(company_id, event_id, receiver)]``."""
    if limit <= 0:
        return []
    names = list(busy)
    rooms = [per_receiver - busy[r] for r in names]
    async with platform_scan_tx(pool, SCOPE) as conn:
        rows = await conn.fetch(_LEASE, now, until, limit, names, rooms, per_receiver)
    return [(r["company_id"], r["event_id"], r["receiver"]) for r in rows]


async def renew(
    pool: asyncpg.Pool, company_id: uuid.UUID, event_id: uuid.UUID, held: datetime, until: datetime
) -> bool:
    """Extend the lease ending at ``held`` to ``until``. False when it is no longer this lessee's."""
    async with platform_scan_tx(pool, SCOPE) as conn:
        status = await conn.execute(
            "UPDATE webhook_queue SET next_attempt_at = $4"
            " WHERE company_id = $1 AND event_id = $2 AND next_attempt_at = $3",
            company_id,
            event_id,
            held,
            until,
        )
    return status == "UPDATE 1"


async def reschedule(
    pool: asyncpg.Pool,
    company_id: uuid.UUID,
    event_id: uuid.UUID,
    held: datetime,
    *,
    due: datetime,
    receiver: str,
    now: datetime,
    error: str,
) -> bool:
    """A failed attempt of the lessee holding ``held``: due again at ``due``, the outbox row's
    ``attempts`` and ``last_error`` updated, in one statement. False (nothing written) when the
    lease was lost. (The queue's policy lets the company's own context write its rows.)"""
    async with tenant_tx(pool, company_id) as conn:
        done = await conn.fetchval(
            "WITH q AS (UPDATE webhook_queue SET next_attempt_at = $2, receiver = $4"
            "  WHERE company_id = app_company_id() AND event_id = $1 AND next_attempt_at = $3 RETURNING 1)"
            " UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = $2, last_error = $5"
            " WHERE id = $1 AND EXISTS (SELECT 1 FROM q) RETURNING true",
            event_id,
            due,
            held,
            receiver,
            error[:500],
        )
    return bool(done)


async def delivered(
    pool: asyncpg.Pool, company_id: uuid.UUID, event_id: uuid.UUID, *, now: datetime, target: str | None
) -> None:
    """Record a delivery (whoever held the lease: it was delivered) and dequeue the event, in one
    statement."""
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute(
            "WITH q AS (DELETE FROM webhook_queue WHERE company_id = app_company_id() AND event_id = $1)"
            " UPDATE webhook_outbox SET attempts = attempts + 1, delivered_at = coalesce(delivered_at, $2),"
            " target_url = coalesce($3, target_url), last_error = NULL WHERE id = $1",
            event_id,
            now,
            target,
        )


async def dead_letter(
    pool: asyncpg.Pool, company_id: uuid.UUID, event_id: uuid.UUID, held: datetime | None, *, now: datetime, error: str
) -> bool:
    """Move the event to the dead-letter state (budget spent or target refused): ``dead_at`` set,
    dequeued, in one statement. ``held``: the lease (None: unfenced). False (nothing written) when
    the lease was lost."""
    async with tenant_tx(pool, company_id) as conn:
        done = await conn.fetchval(
            "WITH q AS (DELETE FROM webhook_queue WHERE company_id = app_company_id() AND event_id = $1"
            "  AND ($3::timestamptz IS NULL OR next_attempt_at = $3) RETURNING 1)"
            " UPDATE webhook_outbox SET attempts = attempts + 1, dead_at = $2, last_error = $4"
            " WHERE id = $1 AND EXISTS (SELECT 1 FROM q) RETURNING true",
            event_id,
            now,
            held,
            error[:500],
        )
    return bool(done)


async def dequeue(pool: asyncpg.Pool, company_id: uuid.UUID, event_id: uuid.UUID) -> None:
    async with platform_scan_tx(pool, SCOPE) as conn:
        await conn.execute("DELETE FROM webhook_queue WHERE company_id = $1 AND event_id = $2", company_id, event_id)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """``depth``: events queued (undelivered, not dead); ``due``: of them, due now (not leased or
    backing off); ``oldest_age``: seconds since the oldest queued event was queued (0 when empty)."""

    depth: int
    due: int
    oldest_age: float


async def queue_stats(pool: asyncpg.Pool, *, now: datetime) -> QueueStats:
    """The queue across every company (one platform-scan read)."""
    async with platform_scan_tx(pool, SCOPE) as conn:
        row = await conn.fetchrow(
            "SELECT count(*) AS depth, count(*) FILTER (WHERE next_attempt_at <= $1) AS due,"
            " min(enqueued_at) AS oldest FROM webhook_queue",
            now,
        )
    oldest = row["oldest"]
    return QueueStats(row["depth"], row["due"], max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)


async def dead_letters(pool: asyncpg.Pool, company_id: uuid.UUID, *, limit: int = 100) -> list[dict[str, Any]]:
    """The company's dead-lettered events, newest first: ``id`` (the Webhook-Id), ``order_id``,
    ``event_type``, ``caller``, ``attempts``, ``last_error``, ``created_at``, ``dead_at``."""
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch(
            "SELECT id, order_id, event_type, caller, attempts, last_error, created_at, dead_at"
            " FROM webhook_outbox WHERE dead_at IS NOT NULL ORDER BY dead_at DESC LIMIT $1",
            limit,
        )
    return [dict(r) for r in rows]


async def requeue(pool: asyncpg.Pool, company_id: uuid.UUID, event_id: uuid.UUID, *, now: datetime) -> bool:
    """Give a dead-lettered event a new retry budget, due now (same Webhook-Id and body). False
    when the company has no such dead event."""
    async with tenant_tx(pool, company_id) as conn:
        caller = await conn.fetchval(
            "UPDATE webhook_outbox SET dead_at = NULL, attempts = 0, next_attempt_at = $2"
            " WHERE id = $1 AND dead_at IS NOT NULL AND delivered_at IS NULL RETURNING caller",
            event_id,
            now,
        )
        if caller is None:
            return False
        await conn.execute(
            "INSERT INTO webhook_queue (company_id, event_id, next_attempt_at, receiver) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT DO NOTHING",
            company_id,
            event_id,
            now,
            caller,
        )
    return True

"""The retention sweeper: deletes rows that no longer decide anything, so runtime tables stay bounded.

Every write dispatch leaves an idempotency record, every confirmed consent a spent nonce. Once past
their life these rows change no answer (the readers ignore them: ``expires_at > now``), but nothing
deleted them, so the tables grew by every request forever. The sweeper deletes them per company,
in its tenant transaction (the tables have FORCE row-level security; the app role sweeps no other
company's rows), in batches of ``batch`` rows, ``margin`` seconds after they expired (the gateway's
clock and PostgreSQL's may differ; a row is never deleted while a reader could still count it).

Like the key scheduler it runs in every replica; a PostgreSQL session advisory lock lets one
replica act per round (the others skip it). The rows to delete are found by time through BRIN
indexes (migration 0059): rows are written in time order, and a BRIN index costs almost nothing on
the write path that the B-tree dropped by 0055 slowed down.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from dataclasses import dataclass
from uuid import UUID

import asyncpg

from .db import tenant_tx
from .errors import GatewayError
from .tenancy import list_companies

__all__ = ["LOCK_KEY", "NONCE_TTL_MAX", "RULES", "Rule", "cutoff", "run_forever", "run_once", "sweep_company"]

log = logging.getLogger(__name__)

#: Advisory lock id: "ucpgwret" as a 63-bit integer.
LOCK_KEY = int.from_bytes(b"ucpgwret", "big") & 0x7FFF_FFFF_FFFF_FFFF
#: The longest a consent nonce can live (the upper bound of ``verbs_nonce_ttl``, seconds): a nonce
#: spent at ``used_at`` expired by ``used_at + NONCE_TTL_MAX`` at the latest, whatever the setting
#: was when it was issued.
NONCE_TTL_MAX = 3600


@dataclass(frozen=True, slots=True)
class Rule:
    """Rows of ``table`` whose ``column`` (timestamptz) is older than ``now - margin - extra``
    seconds decide nothing any more."""

    table: str
    column: str
    extra: int = 0


RULES: tuple[Rule, ...] = (
    Rule("verb_idempotency", "expires_at"),  # the replay read wants expires_at > now
    Rule("commerce_idempotency", "expires_at"),  # the same, for the direct path (commerce_via_verbs=false)
    Rule("verb_nonce_mismatches", "expires_at"),  # the nonce's own expiry (migration 0058)
    Rule("verb_nonces", "used_at", NONCE_TTL_MAX),  # an expired nonce is refused before its row is read
    Rule("webmcp_sessions", "expires_at"),  # a session is refused after expires_at
)


def cutoff(rule: Rule, now: dt.datetime, margin: int) -> dt.datetime:
    """The time before which ``rule``'s rows may be deleted at ``now`` (aware UTC), ``margin``
    seconds after they stopped counting."""
    return now - dt.timedelta(seconds=margin + rule.extra)


def _delete_sql(rule: Rule) -> str:
    # a bounded batch (LIMIT in the subquery); the outer condition holds again for the rows deleted
    return (
        f"DELETE FROM {rule.table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {rule.table} "
        f"WHERE {rule.column} < $1 LIMIT $2)) AND {rule.column} < $1"
    )


async def sweep_company(
    pool: asyncpg.Pool, company_id: UUID, *, now: dt.datetime, margin: int, batch: int, max_batches: int = 20
) -> dict[str, int]:
    """Delete ``company_id``'s expired rows of every rule, ``batch`` rows per transaction and at most
    ``max_batches`` transactions per table (the next round goes on). Returns ``{table: rows}``
    for the tables where rows were deleted. Raises asyncpg errors as they come."""
    out: dict[str, int] = {}
    for rule in RULES:
        sql, before = _delete_sql(rule), cutoff(rule, now, margin)
        for _ in range(max_batches):
            async with tenant_tx(pool, company_id) as conn:
                n = int((await conn.execute(sql, before, batch)).split()[-1])
            if n:
                out[rule.table] = out.get(rule.table, 0) + n
            if n < batch:
                break
    return out


async def run_once(
    pool: asyncpg.Pool, *, now: dt.datetime, margin: int, batch: int
) -> dict[str, dict[str, int]] | None:
    """One round over all companies: ``{slug: {table: rows deleted}}`` for companies where rows
    were deleted, or None when another replica holds the lock (nothing done). A company whose
    sweep fails in the database is logged and skipped; the others are swept."""
    async with pool.acquire() as lock_conn:
        if not await lock_conn.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY):
            return None
        try:
            out: dict[str, dict[str, int]] = {}
            after = None
            while batch_of := await list_companies(pool, after_slug=after, limit=200):
                for c in batch_of:
                    try:
                        done = await sweep_company(pool, c.id, now=now, margin=margin, batch=batch)
                    except asyncpg.PostgresError as exc:  # one company's fault does not stop the others
                        log.warning("retention sweep of %s failed: %s", c.slug, exc.__class__.__name__)
                        continue
                    if done:
                        out[c.slug] = done
                after = batch_of[-1].slug
            return out
        finally:
            await lock_conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)


async def run_forever(pool: asyncpg.Pool, *, now, interval: float, margin: int, batch: int) -> None:
    """Run :func:`run_once` every ``interval`` seconds (the first after a random 50-100 % of it, so
    replicas started together spread out) until cancelled; ``now``: a callable returning aware UTC
    time. Errors are logged (class name only) and the next round tries again."""
    await asyncio.sleep(interval * (0.5 + random.random() / 2))
    while True:
        try:
            done = await run_once(pool, now=now(), margin=margin, batch=batch)
            if done:
                log.info("retention sweep", extra={"deleted": done})
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError, GatewayError) as exc:
            log.warning("retention sweep failed: %s", exc.__class__.__name__)
        await asyncio.sleep(interval)  # cancellation ends the loop

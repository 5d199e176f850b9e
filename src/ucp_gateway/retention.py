"""The retention sweeper: deletes rows that no longer decide anything, so runtime tables stay bounded.

Every write dispatch leaves an idempotency record, every confirmed consent a spent nonce, every
capped call a usage counter of its UTC day. Once past their life these rows change no answer (the
readers ignore them: ``expires_at > now``, ``day = today``), but nothing deleted them, so the
tables grew by every request forever. The sweeper deletes them per company,
in its tenant transaction (the tables have FORCE row-level security; the app role sweeps no other
company's rows), in batches of ``batch`` rows, ``margin`` seconds after they expired (the gateway's
clock and PostgreSQL's may differ; a row is never deleted while a reader could still count it).

Which companies have rows to delete is one read over all of them (:func:`due`: scope
``retention``, role ``ucp_scan``, which sees only company_id and the rule's columns, migration
0090), so a company with nothing expired costs nothing per round; only those companies get tenant
transactions. Like the key scheduler it runs in every replica, one replica acts per round, and a
round is bounded in time and work (:mod:`ucp_gateway.periodic`). The rows are found by time through
BRIN indexes (migrations 0059, 0060, 0090): rows are written in time order, and a BRIN index costs
almost nothing on the write path that the B-tree dropped by 0055 slowed down.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

import asyncpg

from .db import platform_scan_tx, tenant_tx
from .periodic import LOCK_TIMEOUT, SCAN_ROLE, Budget, Round, every, one_replica

__all__ = [
    "COMMERCE_KEEP",
    "LOCK_KEY",
    "NONCE_TTL_MAX",
    "RULES",
    "USAGE_KEEP",
    "Rule",
    "cutoff",
    "due",
    "run_forever",
    "run_once",
    "sweep_company",
    "sweep_table",
]

log = logging.getLogger(__name__)

#: Advisory lock id: "ucpgwret" as a 63-bit integer.
LOCK_KEY = int.from_bytes(b"ucpgwret", "big") & 0x7FFF_FFFF_FFFF_FFFF
#: The longest a consent nonce can live (the upper bound of ``verbs_nonce_ttl``, seconds): a nonce
#: spent at ``used_at`` expired by ``used_at + NONCE_TTL_MAX`` at the latest, whatever the setting
#: was when it was issued.
NONCE_TTL_MAX = 3600
#: How long a day's usage counters (daily caps, per-buyer limits) are kept after the UTC day ended,
#: seconds: they decide nothing once the day is over; yesterday's stay for an operator to look at.
USAGE_KEEP = 2 * 86400
#: How long an abandoned checkout session (expired, never an order) and a webhook event that is no
#: longer queued (delivered, or given up) are kept, seconds: 30 days for support and disputes; they
#: hold buyer data (email, addresses) and nothing reads them once the API answers not_found.
COMMERCE_KEEP = 30 * 86400
#: How long the per-minute SLO counts are kept, seconds: the SLO view's longest window (commerce.slo).
SLO_KEEP = 31 * 86400


@dataclass(frozen=True, slots=True)
class Rule:
    """Rows of ``table`` whose ``column`` (timestamptz) is older than ``now - margin - extra``
    seconds decide nothing any more. ``by_day``: ``column`` is a UTC ``date`` (the day a counter
    counts); its rows go when the whole day is older than that. ``where``: only rows meeting this
    SQL condition too."""

    table: str
    column: str
    extra: int = 0
    by_day: bool = False
    #: a further SQL condition on the rows (which of them are done with)
    where: str = ""


RULES: tuple[Rule, ...] = (
    Rule("verb_idempotency", "expires_at"),  # the replay read wants expires_at > now
    Rule("commerce_idempotency", "expires_at"),  # the same, for the direct path (commerce_via_verbs=false)
    Rule("verb_nonce_mismatches", "expires_at"),  # the nonce's own expiry (migration 0058)
    Rule("verb_nonces", "used_at", NONCE_TTL_MAX),  # an expired nonce is refused before its row is read
    Rule("webmcp_sessions", "expires_at"),  # a session is refused after expires_at
    Rule("checkout_page_tokens", "expires_at"),  # a confirmation form's token is refused after expires_at
    Rule("staff_sessions", "expires_at"),  # a staff browser session opens nothing after expires_at
    Rule("verb_approvals", "expires_at"),  # an approval is not confirmed after expires_at (the audit keeps it)
    Rule("oauth_access_tokens", "expires_at"),  # a bearer token is refused after expires_at (migration 0105)
    # an expired cart answers not_found (commerce.carts); its checkout link goes with it (migration 0120)
    Rule("carts", "expires_at"),
    Rule("mcp_elicitations", "expires_at"),  # a question asked inside an MCP call is not answered after it
    Rule("rate_limit_buckets", "tat"),  # a bucket whose tat has passed is full: the same as no row (0106)
    # a day's counters count only on that UTC day (verbs.store.reserve_cap, count_principal); a few
    # rows per principal and day, so no index: the batch's scan is short
    Rule("verb_daily_usage", "day", USAGE_KEEP, by_day=True),
    Rule("verb_principal_usage", "day", USAGE_KEEP, by_day=True),
    # an expired checkout reads as canceled until it goes; one that became an order stays with it
    Rule("checkout_sessions", "expires_at", COMMERCE_KEEP, where="order_id IS NULL"),
    # the SLO view reads at most SLO_KEEP back (migration 0088)
    Rule("request_slo_minutes", "minute", SLO_KEEP),
    # a buyer's confirmation counts while its checkout is open (at most checkout_ttl)
    Rule("checkout_confirmations", "confirmed_at", COMMERCE_KEEP),
    # an event still queued may be retried: only a delivered or abandoned one goes
    Rule(
        "webhook_outbox",
        "created_at",
        COMMERCE_KEEP,
        where="(delivered_at IS NOT NULL OR NOT EXISTS (SELECT 1 FROM webhook_queue q"
        " WHERE q.company_id = webhook_outbox.company_id AND q.event_id = webhook_outbox.id))",
    ),
)


def cutoff(rule: Rule, now: dt.datetime, margin: int) -> dt.datetime | dt.date:
    """The time before which ``rule``'s rows may be deleted at ``now`` (aware UTC), ``margin``
    seconds after they stopped counting. For a ``by_day`` rule: the UTC date of that time (a day
    before it ended no later than that time)."""
    at = now - dt.timedelta(seconds=margin + rule.extra)
    return at.astimezone(dt.UTC).date() if rule.by_day else at


def _cond(rule: Rule) -> str:
    return f"{rule.column} < $1" + (f" AND {rule.where}" if rule.where else "")


def _delete_sql(rule: Rule) -> str:
    # a bounded batch (LIMIT in the subquery) of rows no request holds (SKIP LOCKED: the next round
    # takes those); the outer condition holds again for the rows deleted
    cond = _cond(rule)
    return (
        f"DELETE FROM {rule.table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {rule.table} "
        f"WHERE {cond} LIMIT $2 FOR UPDATE SKIP LOCKED)) AND {cond}"
    )


def _find_sql(rule: Rule) -> str:
    # the companies among the first $3 expired rows, but those already done this round ($2);
    # read as ucp_scan, which sees company_id and the rule's columns only (migration 0090)
    return (
        f"SELECT DISTINCT s.company_id, c.slug FROM (SELECT company_id FROM {rule.table}"
        f" WHERE {_cond(rule)} AND company_id <> ALL($2::uuid[]) LIMIT $3) s JOIN companies c ON c.id = s.company_id"
    )


async def due(
    pool: asyncpg.Pool, *, now: dt.datetime, margin: int, skip: dict[str, set[UUID]] | None = None, rows: int = 10_000
) -> list[tuple[Rule, UUID, str]]:
    """``(rule, company_id, slug)`` for every company with rows of ``rule`` to delete at ``now``,
    found in one platform transaction over all companies (scope ``retention``, role ``ucp_scan``),
    each rule's search bounded to its first ``rows`` expired rows; ``skip``: ``{table: company ids}``
    left out (done this round)."""
    skip = skip or {}
    out: list[tuple[Rule, UUID, str]] = []
    async with platform_scan_tx(pool, "retention", role=SCAN_ROLE) as conn:
        for rule in RULES:
            found = await conn.fetch(_find_sql(rule), cutoff(rule, now, margin), list(skip.get(rule.table, ())), rows)
            out.extend((rule, r["company_id"], r["slug"]) for r in found)
    return out


async def sweep_table(
    pool: asyncpg.Pool,
    company_id: UUID,
    rule: Rule,
    *,
    now: dt.datetime,
    margin: int,
    batch: int,
    max_batches: int = 20,
) -> tuple[int, bool]:
    """Delete ``company_id``'s expired rows of ``rule``, ``batch`` rows per tenant transaction and at
    most ``max_batches`` transactions. Returns ``(rows deleted, whether rows may be left)``. Raises
    asyncpg errors as they come (LockNotAvailableError: a lock held past ``LOCK_TIMEOUT``)."""
    sql, before, n_all = _delete_sql(rule), cutoff(rule, now, margin), 0
    for _ in range(max_batches):
        async with tenant_tx(pool, company_id, then=LOCK_TIMEOUT) as conn:
            n = int((await conn.execute(sql, before, batch)).split()[-1])
        n_all += n
        if n < batch:
            return n_all, False
    return n_all, True


async def sweep_company(
    pool: asyncpg.Pool, company_id: UUID, *, now: dt.datetime, margin: int, batch: int, max_batches: int = 20
) -> dict[str, int]:
    """Delete ``company_id``'s expired rows of every rule (:func:`sweep_table`). Returns
    ``{table: rows}`` for the tables where rows were deleted. Raises asyncpg errors as they come."""
    out: dict[str, int] = {}
    for rule in RULES:
        n, _ = await sweep_table(pool, company_id, rule, now=now, margin=margin, batch=batch, max_batches=max_batches)
        if n:
            out[rule.table] = n
    return out


async def run_once(
    pool: asyncpg.Pool, *, now: dt.datetime, margin: int, batch: int, budget: Budget | None = None
) -> Round | None:
    """One round: the companies with expired rows are found in one read (:func:`due`), then each
    company's rows of each such table are deleted in its tenant context (:func:`sweep_table`),
    within ``budget``. ``Round.done`` is ``{slug: {table: rows deleted}}``; ``Round.left`` counts the
    ``(company, table)`` sweeps left for the next round (budget spent, more rows than one round's
    batches, a row held by a request, a database error: a company's fault does not stop the others).
    None when another replica holds the lock (nothing done)."""
    budget = budget or Budget()
    async with one_replica(pool, LOCK_KEY) as held:
        if held is None:
            return None
        out, skip = Round(), {}
        while not budget.spent() and (found := await due(pool, now=now, margin=margin, skip=skip)):
            for i, (rule, cid, slug) in enumerate(found):
                if not budget.take():
                    out.left += len(found) - i
                    break
                skip.setdefault(rule.table, set()).add(cid)  # once per round: what is left waits
                await budget.pace(pool)
                try:
                    n, more = await sweep_table(pool, cid, rule, now=now, margin=margin, batch=batch)
                except asyncpg.PostgresError as exc:
                    log.warning("retention sweep of %s failed: %s", slug, exc.__class__.__name__)
                    out.left += 1
                    continue
                if n:
                    tables = out.done.setdefault(slug, {})
                    tables[rule.table] = tables.get(rule.table, 0) + n
                out.left += more
        out.seconds = time.monotonic() - budget.started
        return out


async def run_forever(
    pool: asyncpg.Pool, *, now, interval: float, margin: int, batch: int, budget: Callable[[], Budget] = Budget
) -> None:
    """Run :func:`run_once` every ``interval`` seconds until cancelled (:func:`.periodic.every`);
    ``now``: a callable returning aware UTC time; ``budget``: makes each round's Budget."""

    async def round_() -> None:
        r = await run_once(pool, now=now(), margin=margin, batch=batch, budget=budget())
        if r is not None and (r.done or r.left):
            log.info("retention sweep", extra={"deleted": r.done, "left": r.left, "seconds": r.seconds})

    await every(interval, round_, what="retention sweep", log=log)

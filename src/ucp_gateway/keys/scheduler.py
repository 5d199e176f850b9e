"""The key scheduler: advances time-driven key transitions, for the companies where one is due.

Which companies have a transition due is one read over all of them (:mod:`ucp_gateway.periodic`:
scope ``key_schedule``, role ``ucp_scan``, the partial index ``company_keys_timers`` of migration
0090): a pending key published ``publish_min`` seconds ago (and past its scheduled activation,
if it has one), a rotating key past ``rotating_grace``,
or (with a vault) no active key at all. Only those companies get a tenant transaction, in which
:func:`.repository.advance_company` decides and applies the transitions as before. A company with
nothing due costs nothing per round.

It runs in every replica; one replica acts per round (a session advisory lock, the others skip the
round). It also purges expired replay-cache rows (a platform table), in bounded batches.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from uuid import UUID

import asyncpg

from ..periodic import LOCK_TIMEOUT, Budget, Round, due_scan, every, one_replica
from .repository import Vault, advance_company, ensure_active_key

__all__ = ["LOCK_KEY", "due_companies", "run_forever", "run_once"]

log = logging.getLogger(__name__)

#: Advisory lock id: "ucpgwkey" as a 63-bit integer.
LOCK_KEY = int.from_bytes(b"ucpgwkey", "big") & 0x7FFF_FFFF_FFFF_FFFF
#: Replay-cache rows deleted per statement (a platform table written by every signed request).
NONCE_BATCH = 5000

# companies with a timed transition due ($1: published before, $2: rotating before, $4: now; a
# pending key scheduled later waits for its activate_at, migration 0116), oldest first
_DUE = (
    "SELECT k.company_id, c.slug, min(k.state_changed_at) AS since FROM company_keys k"
    " JOIN companies c ON c.id = k.company_id"
    " WHERE k.state IN ('pending', 'rotating')"
    " AND ((k.state = 'pending' AND k.state_changed_at <= $1 AND (k.activate_at IS NULL OR k.activate_at <= $4))"
    " OR (k.state = 'rotating' AND k.state_changed_at <= $2))"
    " GROUP BY k.company_id, c.slug ORDER BY since, k.company_id LIMIT $3"
)
# companies with no active key (the unique partial index company_keys_one_active answers each probe)
_KEYLESS = (
    "SELECT c.id AS company_id, c.slug FROM companies c WHERE NOT EXISTS"
    " (SELECT 1 FROM company_keys k WHERE k.company_id = c.id AND k.state = 'active') ORDER BY c.id LIMIT $1"
)


async def due_companies(
    pool: asyncpg.Pool, *, now: dt.datetime, publish_min: int, rotating_grace: int, limit: int, keyless: bool
) -> list[tuple[UUID, str, bool]]:
    """``(company_id, slug, has_no_active_key)`` of at most ``limit`` companies with a key transition
    due at ``now`` (and, with ``keyless``, those with no active key), in one platform read."""
    published = now - dt.timedelta(seconds=publish_min)
    grace = now - dt.timedelta(seconds=rotating_grace)
    out: dict[UUID, tuple[UUID, str, bool]] = {}
    if keyless:
        for r in await due_scan(pool, "key_schedule", _KEYLESS, limit):
            out[r["company_id"]] = (r["company_id"], r["slug"], True)
    for r in await due_scan(pool, "key_schedule", _DUE, published, grace, limit, now):
        out.setdefault(r["company_id"], (r["company_id"], r["slug"], False))
    return list(out.values())[:limit]


async def run_once(
    pool: asyncpg.Pool,
    *,
    now: dt.datetime,
    publish_min: int,
    rotating_grace: int,
    vault: Vault | None = None,
    budget: Budget | None = None,
) -> Round | None:
    """One round: ``Round.done`` is ``{slug: [(kid, event), ...]}`` for companies where something
    happened, ``Round.left`` the due companies left for the next round (budget spent, a key row
    locked by a request, a database error); None if another replica holds the lock. With a
    ``vault``, a company with no active key gets its first one (so it is published before it is
    first needed)."""
    budget = budget or Budget()
    async with one_replica(pool, LOCK_KEY) as lock_conn:
        if lock_conn is None:
            return None
        out = Round()
        due = await due_companies(
            pool,
            now=now,
            publish_min=publish_min,
            rotating_grace=rotating_grace,
            limit=budget.items + 1,  # one more than the round may take: it says whether any is left
            keyless=vault is not None,
        )
        for i, (cid, slug, keyless) in enumerate(due):
            if not budget.take():
                out.left += len(due) - i
                break
            await budget.pace(pool)
            try:
                if keyless:
                    kid = await ensure_active_key(pool, cid, now=now, vault=vault)
                    out.done.setdefault(slug, []).append((kid, "create"))
                done = await advance_company(
                    pool, cid, now=now, publish_min=publish_min, rotating_grace=rotating_grace, then=LOCK_TIMEOUT
                )
            except asyncpg.PostgresError as exc:  # a row a request holds, or one company's fault
                log.warning("key scheduler: %s left for the next round: %s", slug, exc.__class__.__name__)
                out.left += 1
                continue
            if done:
                out.done.setdefault(slug, []).extend((kid, ev.value) for kid, ev in done)
        out.left += await _purge_nonces(lock_conn, now, budget)
        out.seconds = time.monotonic() - budget.started
        return out


async def _purge_nonces(conn: asyncpg.Connection, now: dt.datetime, budget: Budget) -> int:
    """Delete expired replay-cache rows, ``NONCE_BATCH`` per statement, while the budget's time
    lasts. Returns 1 when some were left for the next round, else 0."""
    sql = (
        "DELETE FROM signature_nonces WHERE ctid = ANY(ARRAY(SELECT ctid FROM signature_nonces"
        " WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)) AND expires_at <= $1"
    )
    while True:
        n = int((await conn.execute(sql, now, NONCE_BATCH)).split()[-1])
        if n < NONCE_BATCH:
            return 0
        if time.monotonic() - budget.started >= budget.seconds:
            return 1


async def run_forever(
    pool: asyncpg.Pool,
    *,
    now: Callable[[], dt.datetime],
    interval: float,
    publish_min: int,
    rotating_grace: int,
    vault: Vault | None = None,
    budget: Callable[[], Budget] = Budget,
) -> None:
    """Run :func:`run_once` every ``interval`` seconds until cancelled (:func:`..periodic.every`:
    the first after a random 50-100 % of it; errors are logged, not fatal). ``budget``: makes each
    round's :class:`..periodic.Budget`."""

    async def round_() -> None:
        r = await run_once(
            pool, now=now(), publish_min=publish_min, rotating_grace=rotating_grace, vault=vault, budget=budget()
        )
        if r is not None and (r.done or r.left):
            log.info("key transitions", extra={"transitions": r.done, "left": r.left, "seconds": r.seconds})

    await every(interval, round_, what="key scheduler round", log=log)

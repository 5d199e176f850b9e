"""SQL for the runtime's own tables: idempotency records, daily caps, nonces, per-principal usage.

Every function runs inside the caller's tenant transaction (RLS binds it to one company). The
concurrency guarantees come from PostgreSQL, not from the process, so replicas share them:
- an idempotency key is claimed by an INSERT in the executing transaction, so a concurrent
  duplicate blocks on the unique index and then reads the committed receipt;
- a cap is reserved with ``INSERT .. ON CONFLICT DO UPDATE .. WHERE used < limit`` (row lock);
- a nonce is consumed by inserting its id (primary key), in the executing transaction.
"""

from __future__ import annotations

import functools
import re
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from .audit import append_args

__all__ = [
    "append_and_finish_key",
    "cap_used",
    "claim_key",
    "consume_nonce",
    "count_principal",
    "finish_key",
    "principal_used",
    "reserve_cap",
    "stored_key",
]


async def stored_key(
    conn: asyncpg.Connection, principal: str, verb: str, key: str, now: datetime
) -> tuple[str, dict[str, Any] | None] | None:
    """``(args_digest, envelope)`` stored under a live key, or None."""
    r = await conn.fetchrow(
        "SELECT args_digest, envelope FROM verb_idempotency "
        "WHERE principal = $1 AND verb = $2 AND key = $3 AND expires_at > $4",
        principal,
        verb,
        key,
        now,
    )
    return (r["args_digest"], r["envelope"]) if r else None


async def claim_key(
    conn: asyncpg.Connection,
    company_id: UUID,
    principal: str,
    verb: str,
    key: str,
    digest: str,
    now: datetime,
    ttl_seconds: int,
) -> bool:
    """Claim the key for this execution (True), or False when a live record exists (replay/conflict).

    An expired record is taken over. A concurrent claimant waits for this transaction to end.
    """
    r = await conn.fetchval(
        "INSERT INTO verb_idempotency AS i (company_id, principal, verb, key, args_digest, created_at, expires_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7) "
        "ON CONFLICT (company_id, principal, verb, key) DO UPDATE SET args_digest = EXCLUDED.args_digest, "
        " envelope = NULL, audit_id = NULL, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at "
        "WHERE i.expires_at <= EXCLUDED.created_at RETURNING true",
        company_id,
        principal,
        verb,
        key,
        digest,
        now,
        now + timedelta(seconds=ttl_seconds),
    )
    return bool(r)


async def finish_key(
    conn: asyncpg.Connection, principal: str, verb: str, key: str, envelope: dict[str, Any], audit_id: int
) -> None:
    """Store the envelope to replay under the claimed key (same transaction as the effects)."""
    await conn.execute(
        "UPDATE verb_idempotency SET envelope = $4::jsonb, audit_id = $5 "
        "WHERE principal = $1 AND verb = $2 AND key = $3",
        principal,
        verb,
        key,
        envelope,
        audit_id,
    )


async def append_and_finish_key(
    conn: asyncpg.Connection,
    company_id: UUID,
    entry: dict[str, Any],
    *,
    principal: str,
    verb: str,
    key: str,
    envelope: dict[str, Any],
    result_audit_id: bool,
    write: tuple[str, tuple[Any, ...]] | None = None,
) -> tuple[int, int]:
    """Append ``entry`` to the company's audit chain and store the envelope under the claimed key,
    in one statement (the caller's transaction; meant as its last statement before COMMIT, so the
    chain head's row lock is held for this statement and the commit only).

    The new audit id is written into the stored envelope's ``audit_id`` and, when
    ``result_audit_id``, into ``result.audit_id`` (the caller patches its own copy the same way).
    ``entry`` as for :func:`audit.append`. ``write``: the handler's last statement ``(sql, args)``
    (:meth:`VerbContext.write_last`), run as part of this one. Returns ``(audit_id, seq)``.
    """
    args = append_args(company_id, entry)
    head, extra = "", ()
    if write is not None:
        head, extra = "WITH w AS (" + _shift_params(write[0], 12) + " RETURNING 1),", write[1]
    row = await conn.fetchrow(
        # the entry travels once, as the canonical text the chain hashes ($7), stored as its jsonb
        (head or "WITH") + " a AS (SELECT audit_id, seq FROM"
        "  verb_audit_append($1, $2::timestamptz, $3, $4, $5, $6, $7::text::jsonb, $7::text)"
        # a one-time filter: the handler's write runs to completion before the append locks the head
        + (" WHERE (SELECT count(*) FROM w) >= 0" if head else "")
        + "), f AS (UPDATE verb_idempotency i SET audit_id = a.audit_id, envelope = CASE WHEN $12::boolean"
        "   THEN jsonb_set(jsonb_set($11::jsonb, '{audit_id}', to_jsonb(a.audit_id)), '{result,audit_id}',"
        "     to_jsonb(a.audit_id))"
        "   ELSE jsonb_set($11::jsonb, '{audit_id}', to_jsonb(a.audit_id)) END"
        "  FROM a WHERE i.principal = $8 AND i.verb = $9 AND i.key = $10 RETURNING 1)"
        " SELECT audit_id, seq, (SELECT count(*) FROM f) AS finished FROM a",
        *args[:6],
        args[7],
        principal,
        verb,
        key,
        envelope,
        result_audit_id,
        *extra,
    )
    if row["finished"] != 1:  # the claim is this transaction's own row: anything else is a bug
        raise RuntimeError(f"idempotency record for {verb} not found in this transaction")
    return int(row["audit_id"]), int(row["seq"])


_PARAM = re.compile(r"\$(\d+)")


@functools.lru_cache(maxsize=64)
def _shift_params(sql: str, by: int) -> str:
    """``sql`` with ``$n`` renumbered ``$(n+by)``; refuses any other ``$`` (dollar quotes)."""
    if sql.count("$") != len(_PARAM.findall(sql)) or re.search(r"\bRETURNING\b", sql, re.I):
        raise ValueError("a deferred write may hold $n parameters only, and no RETURNING")
    return _PARAM.sub(lambda m: f"${int(m.group(1)) + by}", sql)


async def cap_used(conn: asyncpg.Connection, cap_class: str, day: date) -> int:
    """Executions counted today against ``cap_class``."""
    v = await conn.fetchval("SELECT used FROM verb_daily_usage WHERE cap_class = $1 AND day = $2", cap_class, day)
    return int(v or 0)


async def reserve_cap(conn: asyncpg.Connection, company_id: UUID, cap_class: str, day: date, limit: int) -> bool:
    """Count one execution if today's count is below ``limit``; False when the cap is reached.

    Released automatically when the transaction rolls back (a failed execution does not count).
    """
    if limit <= 0:
        return False
    v = await conn.fetchval(
        "INSERT INTO verb_daily_usage AS u (company_id, cap_class, day, used) VALUES ($1, $2, $3, 1) "
        "ON CONFLICT (company_id, cap_class, day) DO UPDATE SET used = u.used + 1 WHERE u.used < $4 RETURNING used",
        company_id,
        cap_class,
        day,
        limit,
    )
    return v is not None


async def consume_nonce(conn: asyncpg.Connection, company_id: UUID, nonce_id: str, now: datetime) -> bool:
    """Mark a consent nonce used; False if it was used before (``nonce_used``)."""
    v = await conn.fetchval(
        "INSERT INTO verb_nonces (company_id, nonce_id, used_at) VALUES ($1, $2, $3) "
        "ON CONFLICT DO NOTHING RETURNING true",
        company_id,
        nonce_id,
        now,
    )
    return bool(v)


async def principal_used(conn: asyncpg.Connection, principal: str, limit_key: str, day: date) -> tuple[int, int]:
    """``(calls, amount)`` of one principal today under ``limit_key``."""
    r = await conn.fetchrow(
        "SELECT calls, amount FROM verb_principal_usage WHERE principal = $1 AND limit_key = $2 AND day = $3",
        principal,
        limit_key,
        day,
    )
    return (int(r["calls"]), int(r["amount"])) if r else (0, 0)


async def count_principal(
    conn: asyncpg.Connection,
    company_id: UUID,
    principal: str,
    limit_key: str,
    day: date,
    amount: int,
    max_calls: int | None,
    max_amount: int | None,
) -> bool:
    """Atomically count one call (and ``amount`` minor units) within the limits; False when over."""
    v = await conn.fetchval(
        "INSERT INTO verb_principal_usage AS u (company_id, principal, limit_key, day, calls, amount) "
        "SELECT $1, $2, $3, $4, 1, $5 WHERE ($6::int IS NULL OR $6 >= 1) AND ($7::bigint IS NULL OR $5 <= $7) "
        "ON CONFLICT (company_id, principal, limit_key, day) DO UPDATE SET calls = u.calls + 1, "
        " amount = u.amount + EXCLUDED.amount "
        "WHERE ($6::int IS NULL OR u.calls < $6) AND ($7::bigint IS NULL OR u.amount + EXCLUDED.amount <= $7) "
        "RETURNING calls",
        company_id,
        principal,
        limit_key,
        day,
        amount,
        max_calls,
        max_amount,
    )
    return v is not None

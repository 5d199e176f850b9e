"""SQL for the runtime's own tables: idempotency records, daily caps, nonces, per-principal usage.

Every function runs inside the caller's tenant transaction (RLS binds it to one company). The
concurrency guarantees come from PostgreSQL, not from the process, so replicas share them:
- an idempotency key is claimed by a transaction-scoped advisory lock taken by the executing
  transaction's first statement (:func:`claim_sql`), so a concurrent duplicate waits and then
  finds the committed record; the record is written once, by the last statement;
- a cap is reserved with ``INSERT .. ON CONFLICT DO UPDATE .. WHERE used < limit`` (row lock);
- a nonce is consumed by inserting its id (primary key), in the executing transaction.
"""

from __future__ import annotations

import functools
import re
import secrets
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from ..jsonbody import db_dumps
from .audit import append_args

__all__ = [
    "KEY_MAX_LENGTH",
    "KEY_TAKEN",
    "append_and_finish_key",
    "cap_used",
    "claim_sql",
    "consume_nonce",
    "count_principal",
    "phrase_mismatch",
    "principal_used",
    "reserve_cap",
    "stored_key",
]


#: The longest idempotency key accepted, on every door (verb dispatch, UCP REST and MCP).
KEY_MAX_LENGTH = 128


def valid_key(key: object) -> bool:
    """Whether ``key`` is an acceptable idempotency key: a string of 1 to :data:`KEY_MAX_LENGTH`
    characters, all printable (``str.isprintable``: no control, format or line/paragraph separator
    characters, no unassigned code points; a space is printable). The one rule of every door."""
    return isinstance(key, str) and 1 <= len(key) <= KEY_MAX_LENGTH and key.isprintable()


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


KEY_TAKEN = "UV409"  # SQLSTATE of verb_idempotency_claim (migration 0055): a live record exists
_STAMP = re.compile(r"[0-9T:.+-]+")


def claim_sql(principal: str, verb: str, key: str, now: datetime) -> str:
    """The statement that claims an idempotency key, as text to send with ``BEGIN``
    (``tenant_tx(..., then=...)``): the transaction's first statement, before any row lock.

    It takes a transaction-scoped advisory lock on (company, principal, verb, key), so a concurrent
    duplicate waits until this transaction ends, and then raises SQLSTATE :data:`KEY_TAKEN` if a
    record is live at ``now`` (aware datetime): read it with :func:`stored_key` in a new
    transaction and replay or refuse. The strings travel as hex of their UTF-8 bytes (nothing to
    quote); ``now`` as its ISO text. The record itself is written by :func:`append_and_finish_key`.
    Raises: ValueError for a naive ``now``; UnicodeEncodeError for a lone surrogate.
    """
    stamp = now.isoformat()
    if now.tzinfo is None or not _STAMP.fullmatch(stamp):
        raise ValueError("claim_sql needs an aware datetime")
    p, v, k = (s.encode().hex() for s in (principal, verb, key))
    return (
        f"SELECT verb_idempotency_claim(decode('{p}', 'hex'), decode('{v}', 'hex'), decode('{k}', 'hex'),"
        f" '{stamp}'::timestamptz)"
    )


def _envelope_parts(envelope: dict[str, Any], result_audit_id: bool) -> list[str]:
    """The envelope's JSON text split where its audit ids go (``envelope.audit_id`` and, when
    ``result_audit_id``, ``envelope.result.audit_id``): joined with the new id in SQL
    (``array_to_string``), it is the stored envelope. A random placeholder marks the places; one
    that also occurs elsewhere in the text is drawn again."""
    want = 3 if result_audit_id else 2
    while True:
        mark = secrets.randbelow(9 * 10**17) + 10**17  # 18 digits: no part of a longer number
        env = {**envelope, "audit_id": mark}
        if result_audit_id:
            env["result"] = {**envelope["result"], "audit_id": mark}
        parts = db_dumps(env).split(str(mark))
        if len(parts) == want:
            return parts


async def append_and_finish_key(
    conn: asyncpg.Connection,
    company_id: UUID,
    entry: dict[str, Any],
    *,
    principal: str,
    verb: str,
    key: str,
    digest: str,
    now: datetime,
    ttl_seconds: int,
    envelope: dict[str, Any],
    result_audit_id: bool,
    write: tuple[str, tuple[Any, ...], str] | None = None,
    guarded: bool = False,
) -> tuple[int, int] | None:
    """Append ``entry`` to the company's audit chain and write the idempotency record of the key
    claimed with :func:`claim_sql`, in one statement (the caller's transaction; meant as its last
    statement before COMMIT, so the chain head's row lock is held for this statement and the commit
    only).

    The record holds ``digest`` (the arguments' fingerprint), ``envelope`` with the new audit id
    written into its ``audit_id`` and, when ``result_audit_id``, into ``result.audit_id`` (the
    caller patches its own copy the same way), and lives ``ttl_seconds`` from ``now``. An expired
    record under the key is replaced; a live one is not (RuntimeError: the claim lock rules it out).
    ``entry`` as for :func:`audit.append`. ``write``: the handler's last statement ``(sql, args,
    ctes)`` (:meth:`VerbContext.write_last`), run as part of this one. ``guarded``: when ``sql``
    writes no row, neither the audit row nor the record is written (and the handler's ``ctes``
    wrote nothing either, by their own condition): the caller then closes again.
    Returns ``(audit_id, seq)``; None when a guarded write wrote nothing.
    """
    args = append_args(company_id, entry)
    head, extra = "", ()
    if write is not None:
        ctes = _shift_params(write[2], 14, ctes=True) + ", " if write[2] else ""
        head, extra = "WITH " + ctes + "w AS (" + _shift_params(write[0], 14) + " RETURNING 1),", write[1]
    row = await conn.fetchrow(
        # the entry travels once, as the canonical text the chain hashes ($7), stored as its jsonb
        (head or "WITH") + " a AS (SELECT audit_id, seq FROM"
        "  verb_audit_append($1, $2::timestamptz, $3, $4, $5, $6, $7::text::jsonb, $7::text)"
        # a one-time filter: the handler's write runs to completion before the append locks the head
        # (guarded: the append, and so the record, only when the write wrote a row)
        + ((" WHERE (SELECT count(*) FROM w) " + ("> 0" if guarded else ">= 0")) if head else "")
        + "), f AS (INSERT INTO verb_idempotency AS i (company_id, principal, verb, key, args_digest, envelope,"
        "   audit_id, created_at, expires_at)"
        "  SELECT $1, $8, $9, $10, $12, array_to_string($11::text[], a.audit_id::text)::json, a.audit_id, $13, $14"
        "  FROM a ON CONFLICT (company_id, principal, verb, key) DO UPDATE SET args_digest = EXCLUDED.args_digest,"
        "   envelope = EXCLUDED.envelope, audit_id = EXCLUDED.audit_id, created_at = EXCLUDED.created_at,"
        "   expires_at = EXCLUDED.expires_at WHERE i.expires_at <= EXCLUDED.created_at RETURNING 1)"
        " SELECT audit_id, seq, (SELECT count(*) FROM f) AS finished FROM a",
        *args[:6],
        args[7],
        principal,
        verb,
        key,
        _envelope_parts(envelope, result_audit_id),
        digest,
        now,
        now + timedelta(seconds=ttl_seconds),
        *extra,
    )
    if row is None and guarded and write is not None:
        return None
    if row["finished"] != 1:  # the key is locked by this transaction's claim: anything else is a bug
        raise RuntimeError(f"idempotency record for {verb} is live: the claim did not hold")
    return int(row["audit_id"]), int(row["seq"])


_PARAM = re.compile(r"\$(\d+)")


_OWN_NAMES = re.compile(r"(?:^|,)\s*(?:w|a|f)\s+AS\s*\(", re.I)


@functools.lru_cache(maxsize=64)
def _shift_params(sql: str, by: int, *, ctes: bool = False) -> str:
    """``sql`` with ``$n`` renumbered ``$(n+by)``; refuses any other ``$`` (dollar quotes), and a
    RETURNING in a statement (``ctes``: WITH items, which may return, none named w, a or f)."""
    if sql.count("$") != len(_PARAM.findall(sql)) or (not ctes and re.search(r"\bRETURNING\b", sql, re.I)):
        raise ValueError("a deferred write may hold $n parameters only, and no RETURNING")
    if ctes and _OWN_NAMES.search(sql):
        raise ValueError("a deferred write's WITH items may not be named w, a or f")
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


async def phrase_mismatch(
    conn: asyncpg.Connection, company_id: UUID, nonce_id: str, now: datetime, expires_at: datetime, attempts: int
) -> int:
    """Count one wrong typed phrase for the consent nonce ``nonce_id`` (single statement, the
    caller's transaction); the ``attempts``-th also spends the nonce (as :func:`consume_nonce`), so
    no later confirm of it executes. ``expires_at``: the nonce's own expiry (the row's useful life).
    Returns the wrong phrases still allowed for this nonce (0: spent). solid-verbs digest §8 G2."""
    left = await conn.fetchval(
        "WITH m AS (INSERT INTO verb_nonce_mismatches AS m (company_id, nonce_id, mismatches, expires_at)"
        "  VALUES ($1, $2, 1, $4) ON CONFLICT (company_id, nonce_id) DO UPDATE SET mismatches = m.mismatches + 1"
        "  RETURNING mismatches),"
        " spent AS (INSERT INTO verb_nonces (company_id, nonce_id, used_at) SELECT $1, $2, $3 FROM m"
        "  WHERE m.mismatches >= $5 ON CONFLICT DO NOTHING)"
        " SELECT greatest($5 - mismatches, 0) FROM m",
        company_id,
        nonce_id,
        now,
        expires_at,
        attempts,
    )
    return int(left)


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

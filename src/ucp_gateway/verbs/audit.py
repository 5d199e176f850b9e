"""The audit log: one hash-chained, append-only row per dispatch (allowed, denied, pending, failed).

Append-only is enforced by PostgreSQL (migration 0030: a trigger refuses UPDATE, DELETE and
TRUNCATE for every role). Rows are chained per company and lane (migration 0033: 16 lanes, lane =
hash of the principal's subject, one lane per transaction)::

    row_hash = sha256(prev_hash || int8(seq) || int8(audit_id) || canonical_json(entry))

so :func:`verify_chain` (``ucp-gateway audit verify``) names the first row a superuser altered,
removed or re-ordered. ``entry`` is the canonical record (JSON without floats); the plain columns
are copies for indexes and are checked against it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from .consent import canonical_bytes, canonical_json

__all__ = [
    "GENESIS",
    "ChainReport",
    "append",
    "append_args",
    "append_many",
    "plain_audit_args",
    "redact",
    "redaction_free",
    "safe_name",
    "trail",
    "verify_chain",
]

GENESIS = b"\x00" * 32
_SECRET_KEY = re.compile(r"token|secret|password|credential|card|pan|cvv|cvc|authorization", re.I)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


_LEAVES = frozenset({str, int, float, bool, type(None)})
_SECRET_MEMO: dict[str, bool] = {}  # key text -> looks secret (keys repeat: one regex search per key)


def _secret_key(k: Any) -> bool:
    if type(k) is not str:
        return _SECRET_KEY.search(str(k)) is not None
    hit = _SECRET_MEMO.get(k)
    if hit is None:
        hit = _SECRET_KEY.search(k) is not None
        if len(_SECRET_MEMO) < 4096:  # bounded: argument names are few
            _SECRET_MEMO[k] = hit
    return hit


def redact(value: Any) -> Any:
    """Copy of ``value`` with secret-looking keys replaced by ``"[redacted]"`` (digest §8 G15)."""
    if type(value) in _LEAVES:
        return value
    if isinstance(value, Mapping):
        return {k: "[redacted]" if _secret_key(k) else v if type(v) in _LEAVES else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def redaction_free(value: Any) -> bool:
    """True when :func:`redact` would change nothing in ``value``: only exact dicts, lists and JSON
    leaves, and no secret-looking key at any depth. False (not known) for anything else, e.g.
    tuples or other mappings. ``value`` must not be cyclic."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t in _LEAVES:
            continue
        if t is dict:
            for k, x in v.items():
                if _secret_key(k):
                    return False
                if type(x) not in _LEAVES:
                    stack.append(x)
        elif t is list:
            stack.extend(v)
        else:
            return False
    return True


def plain_audit_args(args: dict[str, Any]) -> bool:
    """True when the audit text of ``args`` (``canonical_json(redact(args))``) is the canonical JSON of
    ``consent.clean_args(args)``: no top-level key to clean (only str keys, none ``_``-prefixed) and,
    :func:`redaction_free`, nothing to redact at any depth. ``args`` must not be cyclic."""
    memo, nested = _SECRET_MEMO, None
    for k, v in args.items():
        if type(k) is not str or k[:1] == "_":
            return False
        hit = memo.get(k)
        if hit is None:
            hit = _secret_key(k)
        if hit:
            return False
        if type(v) not in _LEAVES:
            if nested is None:
                nested = [v]
            else:
                nested.append(v)
    return nested is None or redaction_free(nested)


def safe_name(name: Any) -> str:
    """A caller-supplied verb name made safe to store (no control characters, at most 100 chars)."""
    return _CONTROL.sub("?", str(name))[:100] or "?"


# the last (datetime, text) pair iso() made: a dispatch formats its one ``now`` several times (entry,
# receipt, approval) and append_args turns the text back into that datetime. Identity, not equality:
# equal instants in other zones have other texts. The pair holds its datetime, so ``is`` cannot
# match a new object at a recycled address.
_ISO_LAST: tuple[datetime | None, str] = (None, "")


def iso(dt: datetime) -> str:
    """RFC 3339 text of ``dt`` (``datetime.isoformat`` with ``+00:00`` written ``Z``)."""
    global _ISO_LAST
    last = _ISO_LAST
    if dt is last[0]:
        return last[1]
    text = dt.isoformat().replace("+00:00", "Z")
    _ISO_LAST = (dt, text)
    return text


def _parse_at(text: str) -> datetime:
    """The datetime of an entry's ``at`` text: the one iso() formatted it from when it is that very
    text object (the same instant, zone and microseconds as parsing gives), else parsed."""
    last = _ISO_LAST
    if text is last[1] and last[0] is not None:
        return last[0]
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def append(conn: asyncpg.Connection, company_id: UUID, entry: dict[str, Any]) -> tuple[int, int]:
    """Append ``entry`` to the company's chain inside the caller's transaction.

    ``entry`` must hold ``at`` (RFC 3339), ``verb``, ``decision``, ``status`` and ``principal``.
    Returns ``(audit_id, seq)``.
    """
    row = await conn.fetchrow(
        "SELECT audit_id, seq FROM verb_audit_append($1, $2::timestamptz, $3, $4, $5, $6, $7::jsonb, $8)",
        *append_args(company_id, entry),
    )
    return int(row["audit_id"]), int(row["seq"])


def append_args(company_id: UUID, entry: dict[str, Any]) -> tuple[Any, ...]:
    """The eight arguments of ``verb_audit_append($1..$8)`` for ``entry`` (company, time, verb,
    decision, status, principal subject, entry as jsonb, canonical JSON that the chain hashes)."""
    return (
        company_id,
        _parse_at(entry["at"]),
        entry["verb"],
        entry["decision"],
        entry["status"],
        entry["principal"]["subject"],
        entry,
        canonical_json(entry),
    )


async def append_many(conn: asyncpg.Connection, company_id: UUID, entries: list[dict[str, Any]]) -> list[int]:
    """Append several entries in order with one round trip; returns their audit ids."""
    rows = await conn.fetch(
        "SELECT verb_audit_append_batch AS id FROM verb_audit_append_batch($1, $2::text[])",
        company_id,
        [canonical_json(e) for e in entries],
    )
    return [int(r["id"]) for r in rows]


@dataclass(frozen=True, slots=True)
class ChainReport:
    """Result of :func:`verify_chain`: ``ok``; ``rows`` checked; the first broken row (its lane,
    audit_id and seq within the lane) and why."""

    ok: bool
    rows: int
    broken_audit_id: int | None = None
    broken_seq: int | None = None
    problem: str | None = None
    broken_lane: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "rows": self.rows,
            "broken_lane": self.broken_lane,
            "broken_audit_id": self.broken_audit_id,
            "broken_seq": self.broken_seq,
            "problem": self.problem,
        }


def _row_hash(prev: bytes, seq: int, audit_id: int, entry: Any) -> bytes:
    data = prev + seq.to_bytes(8, "big", signed=True) + audit_id.to_bytes(8, "big", signed=True)
    return hashlib.sha256(data + canonical_bytes(entry)).digest()


def _row_problem(r: Mapping[str, Any], prev: bytes, expect_seq: int) -> str | None:
    """Why one stored row does not continue its lane's chain after ``prev``; None when it does."""
    entry = json.loads(r["entry"])
    if r["seq"] != expect_seq:
        return f"sequence gap: expected seq {expect_seq}, found {r['seq']}"
    if bytes(r["prev_hash"]) != prev:
        return "prev_hash does not match the previous row"
    if _row_hash(prev, r["seq"], r["audit_id"], entry) != bytes(r["row_hash"]):
        return "row_hash does not match the row's content"
    cols = (r["verb"], r["decision"], r["status"], str(r["company_id"]), r["subject"], iso(r["created_at"]))
    want = (
        entry.get("verb"),
        entry.get("decision"),
        entry.get("status"),
        entry.get("company_id"),
        entry.get("principal", {}).get("subject"),
        entry.get("at"),
    )
    return "indexed columns differ from the hashed entry" if cols != want else None


async def verify_chain(conn: asyncpg.Connection, company_id: UUID, *, batch: int = 2000) -> ChainReport:
    """Recompute each of the company's audit lanes (migration 0033) from its first row; stop at the
    first broken row.

    Checks per row: seq is the next number in its lane, prev_hash is the previous row_hash,
    row_hash matches the recomputed hash, and the indexed columns equal the entry. Finally each
    lane's head must match its last row, and every lane with rows must have a head.
    Run inside a transaction in the company's tenant context. Returns a :class:`ChainReport`.
    """
    heads = {
        r["lane"]: r
        for r in await conn.fetch(
            "SELECT lane, seq, head_hash FROM verb_audit_heads WHERE company_id = $1 ORDER BY lane", company_id
        )
    }
    lanes = sorted({*heads, *(r["lane"] for r in await conn.fetch("SELECT DISTINCT lane FROM verb_audit_log"))})
    rows = 0
    for lane in lanes:
        prev, expect_seq, last = GENESIS, 1, 0
        while True:
            recs = await conn.fetch(
                "SELECT audit_id, seq, created_at, verb, decision, status, subject, entry::text AS entry, "
                "prev_hash, row_hash, company_id FROM verb_audit_log WHERE lane = $1 AND seq > $2 "
                "ORDER BY seq LIMIT $3",
                lane,
                last,
                batch,
            )
            if not recs:
                break
            for r in recs:
                problem = _row_problem(r, prev, expect_seq)
                if problem:
                    return ChainReport(False, rows, r["audit_id"], r["seq"], problem, lane)
                prev, expect_seq, last, rows = bytes(r["row_hash"]), r["seq"] + 1, r["seq"], rows + 1
        head = heads.get(lane)
        if head is None:
            return ChainReport(False, rows, None, None, "chain head missing", lane)
        if head["seq"] != last or bytes(head["head_hash"]) != prev:
            return ChainReport(
                False, rows, None, head["seq"], "chain head does not match the last row (rows removed?)", lane
            )
    return ChainReport(True, rows)


async def trail(
    conn: asyncpg.Connection,
    *,
    verb: str | None = None,
    decision: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before: int | None = None,
    limit: int = 50,
) -> tuple[list[dict[str, Any]], int | None]:
    """Audit rows newest first, keyset-paginated on audit_id. Returns ``(entries, next_before)``."""
    recs = await conn.fetch(
        "SELECT audit_id, created_at, verb, subject, status, decision, entry->>'reason' AS reason, "
        " entry->'entity' AS entity, entry->>'risk_class' AS risk_class FROM verb_audit_log "
        "WHERE ($1::text IS NULL OR verb = $1) AND ($2::text IS NULL OR decision = $2) "
        " AND ($3::timestamptz IS NULL OR created_at >= $3) AND ($4::timestamptz IS NULL OR created_at < $4) "
        " AND ($5::bigint IS NULL OR audit_id < $5) ORDER BY audit_id DESC LIMIT $6",
        verb,
        decision,
        since,
        until,
        before,
        limit + 1,
    )
    out = []
    for r in recs[:limit]:
        ent = r["entity"] or {}
        item = {
            "audit_id": r["audit_id"],
            "timestamp": iso(r["created_at"]),
            "action": r["verb"],
            "actor": r["subject"],
            "status": r["status"],
            "decision": r["decision"],
            "risk_class": r["risk_class"],
        }
        if r["reason"]:
            item["reason"] = r["reason"]
        if ent.get("id") is not None:
            item["entity_id"] = ent["id"]
        out.append(item)
    nxt = recs[limit - 1]["audit_id"] if len(recs) > limit else None
    return out, nxt

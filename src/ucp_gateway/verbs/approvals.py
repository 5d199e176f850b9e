"""Approvals of human-only verbs: the pending consent a bearer-token caller gets, confirmed by a person.

solid-verbs digest §8 G3: a typed phrase is deterministic from the arguments, so a caller that
holds only a bearer token (an agent over REST, MCP, WebMCP or the CLI) could confirm its own
request. Money movement and irreversible writes (``WRITE_FINANCIAL``, ``IRREVERSIBLE``:
:data:`HUMAN_ONLY`) are therefore confirmed only on a staff page, by a person signed in with a
credential other than the one that asked; the dispatcher answers the caller with
``pending.confirm = "human"``, the approval's id and its URL (``consent_channel_required`` when the
caller tries ``confirm: true`` itself). The page then runs the typed-phrase protocol as that person
(a principal with ``human=True``) with the approval's id as the idempotency key: it runs once.

Table ``verb_approvals`` (migration 0078), always inside the caller's tenant transaction.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from .policy import HUMAN_ONLY

__all__ = [
    "HUMAN_ONLY",
    "Approval",
    "approval_path",
    "create_approval",
    "finish_approval",
    "get_approval",
    "list_open_approvals",
]


def approval_path(approval_id: str) -> str:
    """The staff page of an approval (on the company's host)."""
    return f"/admin/approvals/{approval_id}"


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval row. Times: aware UTC."""

    id: str
    verb: str
    args: dict[str, Any]
    args_digest: str
    risk_class: str
    phrase: str
    requested_by: str
    requested_via: str
    created_at: datetime
    expires_at: datetime
    status: str
    decided_by: str | None
    decided_at: datetime | None
    executed_audit_id: int | None

    def open(self, now: datetime) -> bool:
        return self.status == "pending" and self.expires_at > now


def _row(r: asyncpg.Record) -> Approval:
    return Approval(
        r["id"],
        r["verb"],
        dict(r["args"]),
        r["args_digest"],
        r["risk_class"],
        r["phrase"],
        r["requested_by"],
        r["requested_via"],
        r["created_at"],
        r["expires_at"],
        r["status"],
        r["decided_by"],
        r["decided_at"],
        r["executed_audit_id"],
    )


async def create_approval(
    conn: asyncpg.Connection,
    company_id,
    *,
    verb: str,
    args: dict[str, Any],
    digest: str,
    risk_class: str,
    phrase: str,
    requested_by: str,
    requested_via: str,
    now: datetime,
    ttl: int,
) -> tuple[str, datetime]:
    """Store a pending approval; returns ``(id, expires_at)``. A caller asking again for the same
    verb and arguments within the approval's life gets the same open approval back."""
    got = await conn.fetchrow(
        "SELECT id, expires_at FROM verb_approvals WHERE status = 'pending' AND verb = $1 AND args_digest = $2"
        " AND requested_by = $3 AND expires_at > $4 ORDER BY created_at DESC LIMIT 1",
        verb,
        digest,
        requested_by,
        now,
    )
    if got is not None:
        return got["id"], got["expires_at"]
    aid, expires = f"apr_{secrets.token_hex(16)}", now + timedelta(seconds=ttl)
    await conn.execute(
        "INSERT INTO verb_approvals (id, company_id, verb, args, args_digest, risk_class, phrase, requested_by,"
        " requested_via, created_at, expires_at) VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, $11)",
        aid,
        company_id,
        verb,
        args,
        digest,
        risk_class,
        phrase,
        requested_by,
        requested_via,
        now,
        expires,
    )
    return aid, expires


async def get_approval(conn: asyncpg.Connection, approval_id: str, *, for_update: bool = False) -> Approval | None:
    """The approval or None (RLS: this company's only)."""
    sql = "SELECT * FROM verb_approvals WHERE id = $1" + (" FOR UPDATE" if for_update else "")
    r = await conn.fetchrow(sql, approval_id)
    return None if r is None else _row(r)


async def list_open_approvals(conn: asyncpg.Connection, now: datetime, limit: int = 50) -> list[Approval]:
    """Open approvals, newest first."""
    rows = await conn.fetch(
        "SELECT * FROM verb_approvals WHERE status = 'pending' AND expires_at > $1 ORDER BY created_at DESC LIMIT $2",
        now,
        limit,
    )
    return [_row(r) for r in rows]


async def finish_approval(
    conn: asyncpg.Connection, approval_id: str, *, status: str, by: str, now: datetime, audit_id: int | None = None
) -> bool:
    """Close a pending approval (``executed``, ``declined`` or ``failed``); False when it was not open."""
    res = await conn.execute(
        "UPDATE verb_approvals SET status = $2, decided_by = $3, decided_at = $4, executed_audit_id = $5"
        " WHERE id = $1 AND status = 'pending'",
        approval_id,
        status,
        by,
        now,
        audit_id,
    )
    return res.endswith(" 1")

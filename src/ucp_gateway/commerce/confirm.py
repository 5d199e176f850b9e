"""The buyer's confirmation on the checkout's ``continue_url`` page: what it binds, what it resolves.

A checkout reaches ``requires_escalation`` when one of its error messages has a
``requires_buyer_input`` / ``requires_buyer_review`` severity (UCP checkout.md, status lifecycle).
The page resolves the escalations listed in :data:`PAGE_RESOLVES` (each code the gateway itself
produces): the buyer reviews what they agree to and confirms, and the checkout is recomputed
without that message (``recompute:<status>`` in the status table, so ``ready_for_complete`` when
nothing else is missing). A confirmation binds the checkout's :func:`checkout_digest` (line items,
prices, quantities, totals, currency): ``complete_checkout`` honours it only while the checkout
still has that digest, so a checkout changed after the confirmation needs a new one.

The form carries a random confirmation token (single use, ``ttl`` seconds) and a CSRF token that
also travels in an HttpOnly cookie; only their SHA-256 are stored (table ``checkout_page_tokens``,
migration 0075). Pure helpers first, then the few statements, each inside the caller's tenant
transaction (RLS).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import asyncpg

from ..htmlpage import new_token, token_hash
from ..verbs.consent import canonical_bytes
from . import repo
from .status import TERMINAL, status_for_messages, transition

__all__ = [
    "PAGE_RESOLVES",
    "body_digest",
    "checkout_digest",
    "confirm_as_shown",
    "escalations",
    "has_confirmation",
    "issue_page_token",
    "record_confirmation",
    "resolved_body",
    "spend_page_token",
]

#: escalation code -> what the buyer does on the page ("confirm": review and agree)
PAGE_RESOLVES: Final[Mapping[str, str]] = {"amount_limit_exceeded": "confirm", "buyer_handoff_required": "confirm"}


def checkout_digest(line_items: list[Mapping[str, Any]], totals: list[Mapping[str, Any]], currency: str) -> str:
    """SHA-256 hex of what the buyer agrees to: each line's id, product, unit price and quantity,
    the totals (type, amount in minor units) and the currency (canonical JSON)."""
    value = {
        "currency": currency,
        "line_items": [[li.get("id"), li["item"]["id"], li["item"].get("price"), li["quantity"]] for li in line_items],
        "totals": [[t["type"], t["amount"]] for t in totals],
    }
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def body_digest(body: Mapping[str, Any]) -> str:
    """:func:`checkout_digest` of a checkout response body."""
    return checkout_digest(body.get("line_items") or [], body.get("totals") or [], body.get("currency", "USD"))


def escalations(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The messages that put the checkout in ``requires_escalation`` (errors with a
    ``requires_buyer_*`` severity), each with ``action``: the page's way through it, or None."""
    out = []
    for m in body.get("messages") or []:
        if m.get("type") == "error" and str(m.get("severity", "")).startswith("requires_"):
            out.append({**m, "action": PAGE_RESOLVES.get(m.get("code", ""))})
    return out


def resolved_body(body: Mapping[str, Any], codes: frozenset[str]) -> tuple[dict[str, Any], str]:
    """``(body without the messages of codes, status its messages give)``: the status is what the
    ``recompute:<status>`` event of the status table takes."""
    messages = [m for m in body.get("messages") or [] if not (m.get("type") == "error" and m.get("code") in codes)]
    return {**body, "messages": messages}, status_for_messages(messages)


async def issue_page_token(
    conn: asyncpg.Connection, company_id, checkout_id: str, digest: str, csrf: str, *, now: datetime, ttl: int
) -> str:
    """Store a fresh confirmation token for one form of ``checkout_id`` showing ``digest``, bound to
    the CSRF token ``csrf``; returns the token text (shown once, in the form)."""
    token = new_token()
    await conn.execute(
        "INSERT INTO checkout_page_tokens (company_id, token_hash, checkout_id, csrf_hash, digest, issued_at,"
        " expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        company_id,
        token_hash(token),
        checkout_id,
        token_hash(csrf),
        digest,
        now,
        now + timedelta(seconds=ttl),
    )
    return token


async def spend_page_token(
    conn: asyncpg.Connection, checkout_id: str, token: str, csrf: str, *, now: datetime
) -> tuple[str | None, str]:
    """Spend a confirmation token: ``(digest it was issued for, "")`` once, or ``(None, why)`` with
    ``why`` one of ``invalid`` (unknown, another checkout, or another CSRF token), ``used``,
    ``expired``."""
    digest = await conn.fetchval(
        "UPDATE checkout_page_tokens SET used_at = $4 WHERE token_hash = $1 AND checkout_id = $2"
        " AND csrf_hash = $3 AND used_at IS NULL AND expires_at > $4 RETURNING digest",
        token_hash(token),
        checkout_id,
        token_hash(csrf),
        now,
    )
    if digest is not None:
        return digest, ""
    row = await conn.fetchrow(
        "SELECT used_at, expires_at FROM checkout_page_tokens WHERE token_hash = $1 AND checkout_id = $2"
        " AND csrf_hash = $3",
        token_hash(token),
        checkout_id,
        token_hash(csrf),
    )
    if row is None:
        return None, "invalid"
    return None, "used" if row["used_at"] is not None else "expired"


async def record_confirmation(
    conn: asyncpg.Connection, company_id, checkout_id: str, digest: str, total: int, reason: str, *, now: datetime
) -> None:
    """Record the buyer's confirmation of ``checkout_id`` as it is (``digest``, ``total``)."""
    await conn.execute(
        "INSERT INTO checkout_confirmations (company_id, checkout_id, digest, total, reason, confirmed_at)"
        " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        company_id,
        checkout_id,
        digest,
        total,
        reason,
        now,
    )


async def has_confirmation(conn: asyncpg.Connection, checkout_id: str, digest: str) -> bool:
    """True when the buyer confirmed ``checkout_id`` with exactly this ``digest``."""
    return bool(
        await conn.fetchval(
            "SELECT true FROM checkout_confirmations WHERE checkout_id = $1 AND digest = $2", checkout_id, digest
        )
    )


async def confirm_as_shown(
    conn: asyncpg.Connection, company_id, checkout_id: str, digest: str, *, now: datetime
) -> str:
    """The buyer confirms ``checkout_id`` as they were shown it (``digest``): the escalations the
    page resolves are dropped, the status recomputed (``recompute:<status>``) and the confirmation
    recorded, in the caller's tenant transaction (the row locked). Returns ``""`` once confirmed, or
    why not: ``missing``, ``closed`` (terminal or expired), ``changed`` (another digest now),
    ``nothing`` (no escalation this confirmation resolves). Writes nothing when it refuses.
    Used by the ``continue_url`` page and by consent asked inside an MCP call."""
    row = await repo.get_checkout(conn, checkout_id, for_update=True)
    if row is None:
        return "missing"
    if row["status"] in TERMINAL or row["expires_at"] <= now:
        return "closed"
    body = row["body"]
    if body_digest(body) != digest:
        return "changed"
    codes = frozenset(m["code"] for m in escalations(body) if m["action"] == "confirm")
    if row["status"] != "requires_escalation" or not codes:
        return "nothing"
    new_body, derived = resolved_body(body, codes)
    new_body["status"] = transition(row["status"], f"recompute:{derived}")
    total = next((t["amount"] for t in body.get("totals") or [] if t["type"] == "total"), 0)
    await record_confirmation(conn, company_id, checkout_id, digest, total, ",".join(sorted(codes)), now=now)
    await repo.update_checkout(conn, checkout_id, status=new_body["status"], state=row["state"], body=new_body, now=now)
    return ""

"""Staff browser sessions: a person signs in to the admin pages with a staff API token.

The sign-in form takes a company admin API token (:mod:`.admin_tokens`); the session that opens
gets its own random token, sent only as the HttpOnly, Secure, SameSite=Strict cookie
:data:`COOKIE` (path ``/admin/``) and stored as its SHA-256 (table ``staff_sessions``, migration
0077). Cookie text: ``ucpss_<company uuid hex>_<43 url-safe chars>``: the company part selects the
tenant context for the lookup, as for admin tokens. The CSRF token of the session's forms is
derived from the session token (:func:`csrf_token`), so it is unguessable without the cookie and
needs no storage. A session ends at ``expires_at`` (``staff_session_ttl``), at sign-out, or when its
admin token is revoked or expires. The session acts with the token's role and audit name (``token:<id>``).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
import uuid
from dataclasses import dataclass
from uuid import UUID

import asyncpg

from ..db import tenant_tx
from ..htmlpage import new_token, token_hash
from .admin_tokens import StaffPrincipal

__all__ = ["COOKIE", "COOKIE_PATH", "StaffSession", "csrf_token", "end_session", "open_session", "session_of"]

COOKIE = "ucpgw_staff"
COOKIE_PATH = "/admin/"
_COOKIE = re.compile(r"^ucpss_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$")


@dataclass(frozen=True, slots=True)
class StaffSession:
    """A signed-in person: the admin token's company, role and id, the session's expiry."""

    id: UUID
    company_id: UUID
    role: str
    token_id: UUID
    expires_at: dt.datetime
    csrf: str

    @property
    def actor(self) -> str:
        """Audit name: the admin token's (``token:<id>``), as the admin API writes it."""
        return f"token:{self.token_id}"

    def principal(self) -> StaffPrincipal:
        """The admin API's principal for this person (keys repository calls)."""
        return StaffPrincipal(company_id=self.company_id, role=self.role, token_id=self.token_id)


def csrf_token(cookie_value: str) -> str:
    """The CSRF token of a session's forms: base64url(SHA-256("csrf:" + session cookie))."""
    raw = hashlib.sha256(b"ucpgw-staff-csrf:" + cookie_value.encode()).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


async def open_session(
    pool: asyncpg.Pool, staff: StaffPrincipal, *, now: dt.datetime, ttl: int
) -> tuple[str, StaffSession]:
    """Open a session for an authenticated admin token; returns ``(cookie value, session)``."""
    value = f"ucpss_{staff.company_id.hex}_{new_token()}"
    sid = uuid.uuid4()
    expires = now + dt.timedelta(seconds=ttl)
    async with tenant_tx(pool, staff.company_id) as conn:
        await conn.execute(
            "INSERT INTO staff_sessions (id, company_id, token_hash, admin_token_id, created_at, expires_at)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            sid,
            staff.company_id,
            token_hash(value),
            staff.token_id,
            now,
            expires,
        )
    return value, StaffSession(sid, staff.company_id, staff.role, staff.token_id, expires, csrf_token(value))


async def session_of(pool: asyncpg.Pool, company_id: UUID, cookie_value: str | None, *, now: dt.datetime):
    """The live session of ``cookie_value`` for ``company_id``, or None (malformed, another
    company's, unknown, expired, signed out, or its admin token revoked)."""
    m = _COOKIE.match(cookie_value or "")
    if m is None or UUID(hex=m.group(1)) != company_id:
        return None
    async with tenant_tx(pool, company_id) as conn:
        r = await conn.fetchrow(
            "SELECT s.id, s.expires_at, t.id AS token_id, t.role FROM staff_sessions s"
            " JOIN admin_tokens t ON t.id = s.admin_token_id AND t.revoked_at IS NULL"
            " AND (t.expires_at IS NULL OR t.expires_at > $2)"
            " WHERE s.token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > $2",
            token_hash(cookie_value or ""),
            now,
        )
    if r is None:
        return None
    return StaffSession(r["id"], company_id, r["role"], r["token_id"], r["expires_at"], csrf_token(cookie_value or ""))


async def end_session(pool: asyncpg.Pool, session: StaffSession, *, now: dt.datetime) -> None:
    """Sign out: the session's cookie no longer opens anything."""
    async with tenant_tx(pool, session.company_id) as conn:
        await conn.execute(
            "UPDATE staff_sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL", session.id, now
        )

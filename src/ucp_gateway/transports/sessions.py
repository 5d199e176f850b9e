"""WebMCP browser sessions: a cookie that binds company and user, and a CSRF token derived from it.

Cookie token text: ``wms_<company uuid hex>_<43 url-safe chars>`` (256 random bits). The company
part lets the lookup run inside that company's tenant context (RLS), so a token can never resolve
in another company; only the SHA-256 of the token is stored (a plain hash suffices for 256-bit
random secrets; compares are still constant-time).

CSRF (OWASP "Signed Double-Submit Cookie"): ``csrf = base64url(HMAC-SHA256(token, "webmcp-csrf"))``.
The page script sends it in ``X-CSRF-Token``; the server recomputes it from the HttpOnly session
cookie and compares with :func:`hmac.compare_digest`. A site that cannot read the CSRF cookie
cannot forge the header, and SameSite=Lax keeps the cookie off cross-site POSTs anyway.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import re
import secrets
import uuid
from dataclasses import dataclass
from uuid import UUID

import asyncpg

from ..db import tenant_tx
from ..errors import BadRequest, Forbidden, Unauthorized

__all__ = [
    "COOKIE_NAME",
    "CSRF_COOKIE_NAME",
    "CSRF_HEADER",
    "ROLES",
    "CsrfInvalid",
    "SessionRequired",
    "WebSession",
    "WrongCompany",
    "create_session",
    "csrf_for",
    "load_session",
    "revoke_session",
    "verify_csrf",
]

COOKIE_NAME = "ucpgw_webmcp"
CSRF_COOKIE_NAME = "ucpgw_webmcp_csrf"
CSRF_HEADER = "X-CSRF-Token"
ROLES: tuple[str, ...] = ("read_only", "employee", "admin", "owner")
_TOKEN = re.compile(r"^wms_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$")


class SessionRequired(Unauthorized):
    code = "session_required"


class CsrfInvalid(Forbidden):
    code = "csrf_invalid"


class WrongCompany(Forbidden):
    code = "session_company_mismatch"


@dataclass(frozen=True, slots=True)
class WebSession:
    """An authenticated browser session: the company and the user it binds."""

    id: UUID
    company_id: UUID
    subject: str
    role: str
    expires_at: dt.datetime


def _hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


def csrf_for(token: str) -> str:
    """The CSRF token of a session token (pure; see module docstring)."""
    mac = hmac.new(token.encode("ascii"), b"webmcp-csrf", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def verify_csrf(token: str, presented: str | None) -> None:
    """Raise CsrfInvalid (403) unless ``presented`` equals :func:`csrf_for` of ``token`` (constant time)."""
    expected = csrf_for(token).encode("ascii")
    got = (presented or "").encode("utf-8", "replace")
    if not hmac.compare_digest(expected, got):
        raise CsrfInvalid("a valid X-CSRF-Token header is required")


async def create_session(
    pool: asyncpg.Pool, company_id: UUID, *, subject: str, role: str, now: dt.datetime, ttl: int
) -> tuple[str, WebSession]:
    """Create a session; returns ``(cookie_token, session)``. The token is never stored.

    Args: ttl in seconds (> 0). Raises BadRequest for an unknown role or empty subject.
    """
    if role not in ROLES:
        raise BadRequest(f"role must be one of {', '.join(ROLES)}")
    if not subject or len(subject) > 200:
        raise BadRequest("subject must be 1-200 characters")
    cid = UUID(str(company_id))
    token = f"wms_{cid.hex}_{secrets.token_urlsafe(32)}"
    sid = uuid.uuid4()
    expires = now + dt.timedelta(seconds=ttl)
    async with tenant_tx(pool, cid) as conn:
        await conn.execute(
            "INSERT INTO webmcp_sessions (id, company_id, token_hash, subject, role, created_at, expires_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
            sid, cid, _hash(token), subject, role, now, expires,
        )  # fmt: skip
    return token, WebSession(sid, cid, subject, role, expires)


# A session opened with an admin token (subject "token:<id>", keys.admin_tokens.StaffPrincipal.actor)
# lives only while that token does: revoking the token (or its expiry) ends its sessions (fail closed: a subject of
# that form naming no active token is no session). Other subjects come from another authenticator.
_LOAD = (
    "SELECT s.id, s.token_hash, s.subject, s.role, s.expires_at FROM webmcp_sessions s "
    "WHERE s.token_hash = $1 AND s.revoked_at IS NULL AND CASE"
    " WHEN s.subject ~ '^token:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN EXISTS ("
    "  SELECT 1 FROM admin_tokens t WHERE t.id = substr(s.subject, 7)::uuid AND t.revoked_at IS NULL"
    "  AND (t.expires_at IS NULL OR t.expires_at > now()))"
    " ELSE s.subject !~* '^token:' END"
)


async def load_session(pool: asyncpg.Pool, token: str | None, *, now: dt.datetime) -> WebSession:
    """Resolve a cookie token to its live session. Raises SessionRequired (401) with one message for
    every failure (missing, malformed, unknown, expired, revoked, or its admin token revoked)."""
    fail = SessionRequired("a WebMCP session cookie is required")
    m = _TOKEN.match(token or "")
    if m is None:
        raise fail
    cid = UUID(hex=m.group(1))
    digest = _hash(token or "")
    async with tenant_tx(pool, cid) as conn:
        r = await conn.fetchrow(_LOAD, digest)
    if r is None or not hmac.compare_digest(bytes(r["token_hash"]), digest) or r["expires_at"] <= now:
        raise fail
    return WebSession(r["id"], cid, r["subject"], r["role"], r["expires_at"])


async def revoke_session(pool: asyncpg.Pool, session: WebSession, *, now: dt.datetime) -> None:
    """End a session (logout)."""
    async with tenant_tx(pool, session.company_id) as conn:
        await conn.execute("UPDATE webmcp_sessions SET revoked_at = $2 WHERE id = $1", session.id, now)

"""Company admin API tokens: random bearer tokens stored as SHA-256 hashes, each with a role.

Token text: ``ucpat_<company uuid hex>_<43 url-safe chars>`` (256 random bits). The company part
lets us look the hash up inside that company's tenant context (RLS), with no cross-tenant read.
A plain SHA-256 is enough for 256-bit random secrets (no dictionary to attack); the comparison is
still constant-time.
"""

from __future__ import annotations

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
    "ROLES",
    "AdminAuthError",
    "StaffPrincipal",
    "authenticate_admin",
    "create_admin_token",
    "list_admin_tokens",
    "parse_expiry",
    "require_role",
    "revoke_admin_token",
    "role_at_least",
]

#: Staff roles, lowest first.
ROLES: tuple[str, ...] = ("read_only", "employee", "admin", "owner")
_TOKEN = re.compile(r"^ucpat_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$")


class AdminAuthError(Unauthorized):
    code = "unauthorized"


@dataclass(frozen=True, slots=True)
class StaffPrincipal:
    """An authenticated company staff caller (admin token)."""

    company_id: UUID
    role: str
    token_id: UUID
    kind: str = "staff"

    @property
    def actor(self) -> str:
        """Audit name: ``token:<id>``."""
        return f"token:{self.token_id}"


def role_at_least(role: str, floor: str) -> bool:
    """True if ``role`` >= ``floor`` in read_only < employee < admin < owner."""
    return ROLES.index(role) >= ROLES.index(floor)


def require_role(principal: StaffPrincipal, floor: str) -> None:
    """Raise Forbidden (403) unless the principal's role reaches ``floor``."""
    if not role_at_least(principal.role, floor):
        raise Forbidden(f"this action needs the {floor} role")


def _hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


_SPAN = re.compile(r"^([1-9][0-9]{0,5})([mhd])$")
_UNIT = {"m": 60, "h": 3600, "d": 86400}
MAX_LIFETIME = dt.timedelta(days=3650)


def parse_expiry(text: str | None, now: dt.datetime) -> dt.datetime | None:
    """``--expires`` / ``"expires"``: a span from ``now`` (``90m``, ``12h``, ``30d``) or an RFC 3339
    date-time with an offset; None/empty: never. Returns the UTC instant. Raises BadRequest for
    anything else, a past instant or more than MAX_LIFETIME ahead."""
    if text is None or text == "":
        return None
    m = _SPAN.match(text) if isinstance(text, str) else None
    if m is not None:
        when = now + dt.timedelta(seconds=int(m.group(1)) * _UNIT[m.group(2)])
    else:
        try:
            when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
            if when.tzinfo is None:
                raise ValueError("no offset")
            when = when.astimezone(dt.UTC)
        except (ValueError, OverflowError):
            raise BadRequest("expires must be a span (90m, 12h, 30d) or an RFC 3339 date-time with an offset") from None
    if when <= now or when - now > MAX_LIFETIME:
        raise BadRequest("expires must be in the future and at most 3650 days ahead")
    return when


async def create_admin_token(
    pool: asyncpg.Pool,
    company_id: UUID,
    role: str,
    *,
    now: dt.datetime,
    label: str = "",
    expires_at: dt.datetime | None = None,
) -> tuple[str, UUID]:
    """Create a token; returns ``(token_text, token_id)``. The text is shown once, never stored.
    ``expires_at``: when it stops authenticating (None: until revoked)."""
    if role not in ROLES:
        raise BadRequest(f"role must be one of {', '.join(ROLES)}")
    cid = UUID(str(company_id))
    token = f"ucpat_{cid.hex}_{secrets.token_urlsafe(32)}"
    tid = uuid.uuid4()
    async with tenant_tx(pool, cid) as conn:
        await conn.execute(
            "INSERT INTO admin_tokens (id, company_id, role, token_hash, label, created_at, expires_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
            tid,
            cid,
            role,
            _hash(token),
            label[:200],
            now,
            expires_at,
        )
    return token, tid


async def list_admin_tokens(pool: asyncpg.Pool, company_id: UUID, *, now: dt.datetime) -> list[dict[str, object]]:
    """The company's tokens, newest first: ``{"token_id", "role", "label", "created_at",
    "expires_at", "revoked_at", "state"}`` (times RFC 3339 UTC or None; state ``active``,
    ``expired`` or ``revoked``). Never the token text nor its hash."""
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch(
            "SELECT id, role, label, created_at, expires_at, revoked_at FROM admin_tokens ORDER BY created_at DESC, id"
        )

    def iso(t: dt.datetime | None) -> str | None:
        return None if t is None else t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")

    out: list[dict[str, object]] = []
    for r in rows:
        state = "revoked" if r["revoked_at"] else "expired" if r["expires_at"] and r["expires_at"] <= now else "active"
        out.append(
            {
                "token_id": str(r["id"]),
                "role": r["role"],
                "label": r["label"],
                "created_at": iso(r["created_at"]),
                "expires_at": iso(r["expires_at"]),
                "revoked_at": iso(r["revoked_at"]),
                "state": state,
            }
        )
    return out


async def revoke_admin_token(pool: asyncpg.Pool, company_id: UUID, token_id: UUID, *, now: dt.datetime) -> bool:
    """Revoke a token; True if it was active. Every process refuses it from the next request on (the
    row is read per request), and WebMCP sessions opened with it end with it."""
    async with tenant_tx(pool, company_id) as conn:
        res = await conn.execute(
            "UPDATE admin_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL", token_id, now
        )
    return res.endswith(" 1")


async def authenticate_admin(pool: asyncpg.Pool, authorization_header: str | None) -> StaffPrincipal:
    """Authenticate ``Authorization: Bearer ucpat_...``. Raises AdminAuthError (401), one message
    for every failure (missing, malformed, unknown, revoked, expired: by the database's clock)."""
    fail = AdminAuthError("a valid admin bearer token is required")
    if not authorization_header:
        raise fail
    scheme, _, token = authorization_header.strip().partition(" ")
    token = token.strip()
    m = _TOKEN.match(token)
    if scheme.lower() != "bearer" or m is None:
        raise fail
    cid = UUID(hex=m.group(1))
    digest = _hash(token)
    try:
        async with tenant_tx(pool, cid) as conn:
            r = await conn.fetchrow(
                "SELECT id, role, token_hash FROM admin_tokens WHERE token_hash = $1 AND revoked_at IS NULL"
                " AND (expires_at IS NULL OR expires_at > now())",
                digest,
            )
    except asyncpg.ForeignKeyViolationError:  # pragma: no cover - defensive
        raise fail from None
    if r is None or not hmac.compare_digest(bytes(r["token_hash"]), digest):
        raise fail
    return StaffPrincipal(company_id=cid, role=r["role"], token_id=r["id"])

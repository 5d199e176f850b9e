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


async def create_admin_token(
    pool: asyncpg.Pool, company_id: UUID, role: str, *, now: dt.datetime, label: str = ""
) -> tuple[str, UUID]:
    """Create a token; returns ``(token_text, token_id)``. The text is shown once, never stored."""
    if role not in ROLES:
        raise BadRequest(f"role must be one of {', '.join(ROLES)}")
    cid = UUID(str(company_id))
    token = f"ucpat_{cid.hex}_{secrets.token_urlsafe(32)}"
    tid = uuid.uuid4()
    async with tenant_tx(pool, cid) as conn:
        await conn.execute(
            "INSERT INTO admin_tokens (id, company_id, role, token_hash, label, created_at) "
            "VALUES ($1, $2, $3, $4, $5, $6)",
            tid,
            cid,
            role,
            _hash(token),
            label[:200],
            now,
        )
    return token, tid


async def revoke_admin_token(pool: asyncpg.Pool, company_id: UUID, token_id: UUID, *, now: dt.datetime) -> bool:
    """Revoke a token; True if it was active."""
    async with tenant_tx(pool, company_id) as conn:
        res = await conn.execute(
            "UPDATE admin_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL", token_id, now
        )
    return res.endswith(" 1")


async def authenticate_admin(pool: asyncpg.Pool, authorization_header: str | None) -> StaffPrincipal:
    """Authenticate ``Authorization: Bearer ucpat_...``. Raises AdminAuthError (401), one message
    for every failure (missing, malformed, unknown, revoked)."""
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
                "SELECT id, role, token_hash FROM admin_tokens WHERE token_hash = $1 AND revoked_at IS NULL",
                digest,
            )
    except asyncpg.ForeignKeyViolationError:  # pragma: no cover - defensive
        raise fail from None
    if r is None or not hmac.compare_digest(bytes(r["token_hash"]), digest):
        raise fail
    return StaffPrincipal(company_id=cid, role=r["role"], token_id=r["id"])

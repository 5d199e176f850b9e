"""Who is calling over HTTP: a pluggable authenticator turning a request into a :class:`Principal`.

Until the admin API tokens of the signatures work are wired in, staff authenticate with bearer
tokens from ``verb_staff_tokens`` (only a SHA-256 of each token is stored; compare happens in the
database by hash, so no secret is ever compared in Python or logged).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import asyncpg

from ..db import tenant_tx
from ..errors import BadRequest, Unauthorized
from ..tenancy import Company
from .policy import ROLES, Principal

__all__ = ["TOKEN_PREFIX", "Authenticator", "issue_staff_token", "staff_token_authenticator"]

TOKEN_PREFIX = "ucpgw_st_"  # noqa: S105 - a prefix, not a secret
# async (pool, company, authorization header or None, request) -> Principal | None
Authenticator = Callable[[asyncpg.Pool, Company, str | None, Any], Awaitable[Principal | None]]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def issue_staff_token(pool: asyncpg.Pool, company_id: UUID, role: str, subject: str) -> str:
    """Create a bearer token for a staff member with ``role``; returns it (shown once, never stored).

    Raises: BadRequest for an unknown role.
    """
    if role not in ROLES:
        raise BadRequest(f"role must be one of {', '.join(ROLES)}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute(
            "INSERT INTO verb_staff_tokens (company_id, token_sha256, role, subject) VALUES ($1,$2,$3,$4)",
            company_id,
            _digest(token),
            role,
            subject,
        )
    return token


async def staff_token_authenticator(pool: asyncpg.Pool, company: Company, authorization: str | None, request: Any):
    """``Authorization: Bearer ucpgw_st_...`` -> staff Principal of that company, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    async with tenant_tx(pool, company.id) as conn:
        row = await conn.fetchrow("SELECT role, subject FROM verb_staff_tokens WHERE token_sha256 = $1", _digest(token))
    if row is None:
        return None
    return Principal("staff", company.id, row["role"], row["subject"], "http")


async def admin_token_authenticator(pool: asyncpg.Pool, company: Company, authorization: str | None, request: Any):
    """Company admin API tokens (``ucpat_...``, ``ucp_gateway.keys.admin_tokens``) -> staff Principal.

    Returns None when that module is not installed, the token is not valid, or it belongs to
    another company than the request's host.
    """
    try:
        from ..keys.admin_tokens import authenticate_admin
    except ImportError:
        return None
    try:
        staff = await authenticate_admin(pool, authorization)
    except Unauthorized:
        return None
    if staff.company_id != company.id:
        return None
    return Principal("staff", company.id, staff.role, getattr(staff, "actor", str(staff.token_id)), "http")


async def default_authenticator(pool: asyncpg.Pool, company: Company, authorization: str | None, request: Any):
    """Admin API tokens first, then the runtime's own staff tokens."""
    return await admin_token_authenticator(pool, company, authorization, request) or await staff_token_authenticator(
        pool, company, authorization, request
    )

"""Who is calling over HTTP: a pluggable authenticator turning a request into a :class:`Principal`.

Staff authenticate with the company admin API tokens of :mod:`ucp_gateway.keys.admin_tokens`
(``Authorization: Bearer ucpat_...``; only a SHA-256 of each token is stored). There is one token
system for the admin API and the verb front door.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import asyncpg

from ..errors import Unauthorized
from ..keys.admin_tokens import authenticate_admin, create_admin_token
from ..tenancy import Company
from .policy import Principal

__all__ = ["Authenticator", "admin_token_authenticator", "default_authenticator", "issue_staff_token"]

# async (pool, company, authorization header or None, request) -> Principal | None
Authenticator = Callable[[asyncpg.Pool, Company, str | None, Any], Awaitable[Principal | None]]


async def issue_staff_token(pool: asyncpg.Pool, company_id: UUID, role: str, subject: str) -> str:
    """Create a staff bearer token (an admin API token labelled ``subject``); returns it once.

    Raises: BadRequest for an unknown role.
    """
    token, _ = await create_admin_token(pool, company_id, role, now=dt.datetime.now(dt.UTC), label=subject)
    return token


async def admin_token_authenticator(pool: asyncpg.Pool, company: Company, authorization: str | None, request: Any):
    """Company admin API tokens (``ucpat_...``) -> staff Principal of the request's company.

    Returns None when the token is missing, not valid, revoked, or belongs to another company than
    the request's host (no oracle: all give the same 401 upstream).
    """
    if not authorization:
        return None
    try:
        staff = await authenticate_admin(pool, authorization)
    except Unauthorized:
        return None
    if staff.company_id != company.id:
        return None
    return Principal("staff", company.id, staff.role, staff.actor, "http")


default_authenticator: Authenticator = admin_token_authenticator

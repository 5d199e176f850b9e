"""Partner registry: known platform profile URLs per company, each with a role and a tier.

How a verified agent identity (the platform profile URL its signature was checked against) becomes a
role for the consent rules: a registered partner gets its role and tier; an unknown agent gets the
company's default role (``read_only`` unless configured), or is refused with ``profile_not_trusted``
when the company runs in allowlist mode (UCP signatures.md, pre-approved platform registry).
Every query runs in the company's tenant context (RLS).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from ..db import tenant_tx
from ..errors import BadRequest, NotFound
from ..tenancy import TIERS
from .agent_header import validate_profile_url
from .errors import InvalidProfileUrl, ProfileNotTrusted

__all__ = [
    "PARTNER_ROLES",
    "TRUST_MODES",
    "AgentRole",
    "Partner",
    "PartnerPolicy",
    "add_partner",
    "get_policy",
    "list_partners",
    "remove_partner",
    "role_for_agent",
    "set_policy",
]

PARTNER_ROLES: tuple[str, ...] = ("buyer", "read_only", "employee", "admin", "owner")
TRUST_MODES: tuple[str, ...] = ("open", "allowlist")


@dataclass(frozen=True, slots=True)
class Partner:
    company_id: UUID
    profile_url: str
    role: str
    tier: str
    display_name: str | None
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "profile_url": self.profile_url,
            "role": self.role,
            "tier": self.tier,
            "display_name": self.display_name,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class PartnerPolicy:
    trust_mode: str = "open"
    default_role: str = "read_only"


@dataclass(frozen=True, slots=True)
class AgentRole:
    """The role a verified agent acts with. ``partner`` is False for the default role."""

    role: str
    tier: str | None
    partner: bool


class PartnerNotFound(NotFound):
    code = "partner_not_found"


def _check(role: str | None, tier: str | None, url: str | None, http_hosts: frozenset[str]) -> None:
    if role is not None and role not in PARTNER_ROLES:
        raise BadRequest(f"role must be one of {', '.join(PARTNER_ROLES)}")
    if tier is not None and tier not in TIERS:
        raise BadRequest(f"tier must be one of {', '.join(TIERS)}")
    if url is not None:
        try:
            validate_profile_url(url, http_hosts=http_hosts)
        except InvalidProfileUrl as exc:
            raise BadRequest(exc.message, code="invalid_profile_url") from None


async def add_partner(
    pool: asyncpg.Pool,
    company_id: UUID,
    *,
    profile_url: str,
    role: str,
    tier: str = "starter",
    display_name: str | None = None,
    http_hosts: frozenset[str] = frozenset(),
) -> Partner:
    """Register (or update) a partner platform. Raises BadRequest on an invalid URL, role or tier."""
    _check(role, tier, profile_url, http_hosts)
    async with tenant_tx(pool, company_id) as conn:
        r = await conn.fetchrow(
            "INSERT INTO partners (company_id, profile_url, role, tier, display_name) "
            "VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (company_id, profile_url) DO UPDATE SET role = EXCLUDED.role, tier = EXCLUDED.tier, "
            " display_name = coalesce(EXCLUDED.display_name, partners.display_name), updated_at = now() "
            "RETURNING company_id, profile_url, role, tier, display_name, created_at",
            company_id,
            profile_url,
            role,
            tier,
            display_name,
        )
    return Partner(**dict(r))


async def list_partners(pool: asyncpg.Pool, company_id: UUID) -> list[Partner]:
    """The company's partners ordered by profile URL."""
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch(
            "SELECT company_id, profile_url, role, tier, display_name, created_at FROM partners ORDER BY profile_url"
        )
    return [Partner(**dict(r)) for r in rows]


async def remove_partner(pool: asyncpg.Pool, company_id: UUID, profile_url: str) -> None:
    """Remove a partner. Raises PartnerNotFound when it is not registered."""
    async with tenant_tx(pool, company_id) as conn:
        status = await conn.execute("DELETE FROM partners WHERE profile_url = $1", profile_url)
    if status.endswith(" 0"):
        raise PartnerNotFound(f"no partner {profile_url!r}")


async def get_policy(pool: asyncpg.Pool, company_id: UUID) -> PartnerPolicy:
    """The company's trust policy (defaults: open, read_only)."""
    async with tenant_tx(pool, company_id) as conn:
        r = await conn.fetchrow("SELECT trust_mode, default_role FROM partner_policies")
    return PartnerPolicy(r["trust_mode"], r["default_role"]) if r else PartnerPolicy()


async def set_policy(
    pool: asyncpg.Pool, company_id: UUID, *, trust_mode: str | None = None, default_role: str | None = None
) -> PartnerPolicy:
    """Change the trust mode and/or default role. Raises BadRequest on unknown values."""
    if trust_mode is not None and trust_mode not in TRUST_MODES:
        raise BadRequest(f"trust mode must be one of {', '.join(TRUST_MODES)}")
    _check(default_role, None, None, frozenset())
    async with tenant_tx(pool, company_id) as conn:
        r = await conn.fetchrow(
            "INSERT INTO partner_policies (company_id, trust_mode, default_role) "
            "VALUES ($1, coalesce($2, 'open'), coalesce($3, 'read_only')) "
            "ON CONFLICT (company_id) DO UPDATE SET trust_mode = coalesce($2, partner_policies.trust_mode), "
            " default_role = coalesce($3, partner_policies.default_role), updated_at = now() "
            "RETURNING trust_mode, default_role",
            company_id,
            trust_mode,
            default_role,
        )
    return PartnerPolicy(r["trust_mode"], r["default_role"])


async def role_for_agent(pool: asyncpg.Pool, company_id: UUID, profile_url: str) -> AgentRole:
    """The role for a verified agent identity at this company.

    Returns: the partner's role and tier, or the default role for an unknown agent.
    Raises: ProfileNotTrusted (403) for an unknown agent when the company is in allowlist mode.
    """
    async with tenant_tx(pool, company_id) as conn:
        r = await conn.fetchrow("SELECT role, tier FROM partners WHERE profile_url = $1", profile_url)
        if r is not None:
            return AgentRole(r["role"], r["tier"], True)
        p = await conn.fetchrow("SELECT trust_mode, default_role FROM partner_policies")
    policy = PartnerPolicy(p["trust_mode"], p["default_role"]) if p else PartnerPolicy()
    if policy.trust_mode == "allowlist":
        raise ProfileNotTrusted("this platform profile is not registered with the company")
    return AgentRole(policy.default_role, None, False)

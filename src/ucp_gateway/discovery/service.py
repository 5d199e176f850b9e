"""Per-request negotiation (imperative shell around :mod:`negotiation`).

Order matters for safety: the ``UCP-Agent`` header is parsed first (400), the company's trust policy
is applied before any outbound fetch (403, so an untrusted URL never causes a fetch), then the
platform profile is fetched (400/424/422) and negotiated (422 or the 200 ``capabilities_incompatible``
envelope).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from .. import metrics
from ..errors import GatewayError
from ..tenancy import Company
from ..versions import ROOT
from .agent_header import AgentHeader, parse_ucp_agent
from .fetcher import ProfileFetcher
from .negotiation import Negotiated, check_version, negotiate
from .partners import AgentRole, role_for_agent
from .profiles import PlatformProfile

__all__ = ["RequestNegotiation", "negotiate_request"]

# negotiate() is pure: its result for the very same profile objects (the fetcher's and the business
# profile caches hand out one object until they refresh it) is reused. Keyed by identity, and the
# entry keeps both objects so an id is never reused while its entry lives.
_MEMO: OrderedDict[tuple, tuple[Any, Any, Negotiated]] = OrderedDict()
_MEMO_SIZE = 1024


def _negotiate_memo(ucp: Mapping[str, Any], profile: PlatformProfile, version: str, operation, continue_url):
    key = (id(ucp), id(profile), version, operation, continue_url)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is ucp and hit[1] is profile:
        return hit[2]
    negotiated = negotiate(  # raises (not cached): VersionUnsupported, CapabilitiesIncompatible
        platform_version=version,
        platform_capabilities=profile.capabilities,
        business_version=ucp["version"],
        business_capabilities=ucp.get("capabilities") or {},
        supported_versions=ucp.get("supported_versions"),
        operation=operation,
        continue_url=continue_url,
    )
    _MEMO[key] = (ucp, profile, negotiated)
    while len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    return negotiated


@dataclass(frozen=True, slots=True)
class RequestNegotiation:
    """Everything a transport needs after negotiation: who called, with which role, and what is active."""

    agent: AgentHeader
    profile: PlatformProfile
    role: AgentRole
    negotiated: Negotiated


async def negotiate_request(
    *,
    header: str | None,
    fetcher: ProfileFetcher,
    pool: asyncpg.Pool,
    company: Company,
    business_profiles: Mapping[str, Mapping[str, Any]],
    operation: str | None = None,
    continue_url: str | None = None,
    http_hosts: frozenset[str] = frozenset(),
    agent: AgentHeader | None = None,
    role: AgentRole | None = None,
) -> RequestNegotiation:
    """Parse ``UCP-Agent`` (or take ``agent`` from MCP meta), check trust, fetch, negotiate.

    Args:
        header: the raw ``UCP-Agent`` value (ignored when ``agent`` is given).
        business_profiles: the company's profile per served version (``{version: document}``,
            ``build_company_profile`` output): the request is negotiated against the document of the
            platform's version (OV "Negotiation": exactly one profile; the root's ``ucp.version`` or a
            ``supported_versions`` key, else 422 ``version_unsupported``).
        operation: ``checkout`` | ``cart`` | ``order`` | ``catalog`` | a capability name, or None.
        role: the agent's role when the trust middleware already resolved it for this request
            (``REQ_AGENT_ROLE``, same profile URL): saves the partner lookup's transaction.
    Raises: InvalidProfileUrl 400, ProfileNotTrusted 403, ProfileUnreachable 424, ProfileMalformed 422,
        VersionUnsupported 422, CapabilitiesIncompatible (200 envelope).
    """
    agent = agent or parse_ucp_agent(header, http_hosts=http_hosts)
    if role is None:
        role = await role_for_agent(pool, company.id, agent.profile)
    version = agent.version
    try:
        profile = await fetcher.get_profile(agent.profile)
        version = agent.version or profile.version
        root = business_profiles[ROOT]["ucp"]
        # 422 version_unsupported unless the root's version or a supported_versions key
        chosen = check_version(version, root["version"], root.get("supported_versions"))
        negotiated = _negotiate_memo(business_profiles[chosen]["ucp"], profile, version, operation, continue_url)
    except GatewayError as exc:
        metrics.NEGOTIATIONS.labels(
            metrics.bounded("version", version, pattern=metrics.VERSION_PATTERN), exc.code
        ).inc()
        raise
    metrics.NEGOTIATIONS.labels(metrics.bounded("version", version, pattern=metrics.VERSION_PATTERN), "ok").inc()
    return RequestNegotiation(agent, profile, role, negotiated)

"""Discovery and negotiation (UCP 2026-04-08): ``/.well-known/ucp``, the platform -> company ->
sub-agent graph, the platform-profile fetcher, and capability negotiation.

Public surface::

    parse_ucp_agent(header) -> AgentHeader            # RFC 8941, 400 invalid_profile_url
    check_version / intersect_capabilities / prune_extensions / negotiate   # pure
    ProfileFetcher(settings, clock=, resolver=)       # .get_profile(url), .resolve(url, kid, force_refresh=)
    negotiate_request(header=, fetcher=, pool=, company=, business_profiles=, operation=)
    partners: add_partner / list_partners / remove_partner / role_for_agent / set_policy
    web.setup(app)                                    # routes, app[PROFILE_FETCHER] (= KEY_RESOLVER),
                                                      # trust middleware -> request[trust.REQ_AGENT_ROLE]
"""

from .agent_header import AgentHeader, agent_from_meta, parse_ucp_agent, validate_profile_url
from .builder import SubagentSummary, VendorNamespace, build_company_profile, build_platform_profile
from .errors import (
    CapabilitiesIncompatible,
    InvalidProfileUrl,
    ProfileMalformed,
    ProfileNotTrusted,
    ProfileUnreachable,
    VersionUnsupported,
)
from .fetcher import ProfileFetcher
from .negotiation import (
    Negotiated,
    check_version,
    intersect_capabilities,
    negotiate,
    prune_extensions,
    require_capability,
    select_for_operation,
)
from .profiles import PlatformProfile, parse_platform_profile
from .service import RequestNegotiation, negotiate_request

__all__ = [
    "AgentHeader",
    "CapabilitiesIncompatible",
    "InvalidProfileUrl",
    "Negotiated",
    "PlatformProfile",
    "ProfileFetcher",
    "ProfileMalformed",
    "ProfileNotTrusted",
    "ProfileUnreachable",
    "RequestNegotiation",
    "SubagentSummary",
    "VendorNamespace",
    "VersionUnsupported",
    "agent_from_meta",
    "build_company_profile",
    "build_platform_profile",
    "check_version",
    "intersect_capabilities",
    "negotiate",
    "negotiate_request",
    "parse_platform_profile",
    "parse_ucp_agent",
    "prune_extensions",
    "require_capability",
    "select_for_operation",
    "validate_profile_url",
]

"""Trust middleware: the partner registry applied to every request that names a platform profile.

Runs BEFORE the signature middleware (so in allowlist mode an unregistered profile URL is refused
with 403 ``profile_not_trusted`` before any outbound fetch) and stores the caller's
:class:`~ucp_gateway.discovery.partners.AgentRole` on the request under :data:`REQ_AGENT_ROLE`
for the consent rules (role and tier of a registered partner, else the company's default role).
The role only counts once the signature middleware has verified the same profile.
Lookups are cached per (company, profile URL) for ``partner_cache_ttl`` seconds.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from uuid import UUID

from aiohttp import web
from multidict import istr

from ..appkeys import DATABASE, REQ_COMPANY, SETTINGS
from ..httpsig.web import BLOCK_CACHE
from .agent_header import parse_ucp_agent
from .errors import ProfileNotTrusted
from .partners import AgentRole, role_for_agent

__all__ = ["REQ_AGENT_ROLE", "TrustCache", "trust_exempt", "trust_middleware"]

REQ_AGENT_ROLE = web.RequestKey("ucpgw.agent_role", AgentRole)  # AgentRole of the UCP-Agent profile
_EXEMPT = ("/.well-known/", "/admin/", "/healthz", "/readyz")
_UCP_AGENT = istr("UCP-Agent")  # istr: no case folding of the name on every request


@functools.lru_cache(maxsize=64)
def _http_hosts(dev_mode: bool, hosts: tuple[str, ...]) -> frozenset[str]:
    """The hosts whose profile URLs may be http (dev mode only), lower-cased: one object per value,
    so parse_ucp_agent's memo hashes a cached frozenset instead of a new one per request."""
    return frozenset(h.lower() for h in hosts) if dev_mode else frozenset()


def trust_exempt(path: str) -> bool:
    """True when :func:`trust_middleware` never acts on ``path`` (public documents, admin, health)."""
    return path.startswith(_EXEMPT)


class TrustCache:
    """(company, profile URL) -> AgentRole or the ProfileNotTrusted refusal, for ``ttl`` seconds."""

    def __init__(self, ttl: float, capacity: int = 4096):
        self.ttl = ttl
        self.capacity = capacity
        self._entries: OrderedDict[tuple[UUID, str], tuple[float, AgentRole | None]] = OrderedDict()

    async def role(self, request: web.Request, company_id: UUID, profile: str) -> AgentRole:
        key = (company_id, profile)
        hit = self._entries.get(key)
        now = time.monotonic()
        if hit is None or now >= hit[0]:
            try:
                value: AgentRole | None = await role_for_agent(request.app[DATABASE].pool, company_id, profile)
            except ProfileNotTrusted:
                value = None
            hit = (now + self.ttl, value)
            self._entries[key] = hit
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        if hit[1] is None:
            raise ProfileNotTrusted("this platform profile is not registered with the company")
        return hit[1]


TRUST_CACHE = web.AppKey("ucpgw.trust_cache", TrustCache)


@web.middleware
async def trust_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """On company hosts, for requests with ``UCP-Agent``: 400 on a malformed header, 403 for a profile
    the company blocked (httpsig.blocks) and, in allowlist mode, for an unregistered one, else
    ``request[REQ_AGENT_ROLE]`` is set."""
    company = request.get(REQ_COMPANY)
    header = request.headers.get(_UCP_AGENT)
    if company is None or header is None or trust_exempt(request.path):
        return await handler(request)
    settings = request.app[SETTINGS]
    agent = parse_ucp_agent(header, http_hosts=_http_hosts(settings.dev_mode, tuple(settings.dev_profile_hosts)))
    if agent.profile in (await request.app[BLOCK_CACHE].get(request.app[DATABASE].pool, company.id)).profiles:
        raise ProfileNotTrusted("this platform profile is blocked by the business")
    request[REQ_AGENT_ROLE] = await request.app[TRUST_CACHE].role(request, company.id, agent.profile)
    return await handler(request)

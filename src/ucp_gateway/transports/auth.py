"""Who calls ``POST /api/v1/agent/dispatch`` from a remote transport (wraps the verbs authenticator).

Installed by :func:`.web.setup` around ``app[VERBS].authenticator``:

1. the verbs runtime's own staff bearer tokens, unchanged;
2. an agent whose RFC 9421 signature the httpsig middleware verified (``request[REQ_PRINCIPAL]``,
   ``authenticated``): its role comes from the company's partner registry (discovery), a partner
   role ``buyer`` makes a buyer principal; without that registry the role is ``read_only``;
3. nobody, through the stdio bridge (``Verb-Surface: mcp_stdio``): an anonymous buyer principal,
   only for a READ verb (bridge reads "work without a key", solid-verbs transport.md); buyers reach
   only verbs whose policy admits them. Elsewhere no credentials stay 401 ``auth_required``.

The transport the call came through is the ``Verb-Surface`` request header, one of
:data:`REMOTE_SURFACES` (``http`` when absent). ``webmcp`` and ``ucp`` are never accepted here:
those doors authenticate differently (cookie + CSRF, UCP signature) and have their own routes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import asyncpg

from ..appkeys import REQ_PRINCIPAL, REQ_RAW_BODY
from ..discovery.partners import role_for_agent
from ..errors import BadRequest
from ..jsonbody import InvalidJson, loads_strict
from ..verbs.auth import Authenticator
from ..verbs.policy import Principal, RiskClass

__all__ = ["REMOTE_SURFACES", "SURFACE_HEADER", "remote_authenticator"]

SURFACE_HEADER = "Verb-Surface"
REMOTE_SURFACES: tuple[str, ...] = ("http", "cli", "mcp_stdio")


class SurfaceInvalid(BadRequest):
    code = "invalid_request"


def _surface(request: Any) -> str:
    s = request.headers.get(SURFACE_HEADER, "http") if request is not None else "http"
    if s not in REMOTE_SURFACES:
        raise SurfaceInvalid(f"{SURFACE_HEADER} must be one of {', '.join(REMOTE_SURFACES)}")
    return s


async def _agent_role(pool: asyncpg.Pool, company_id, profile_url: str) -> str:
    return (await role_for_agent(pool, company_id, profile_url)).role


async def _requested_verb_is_read(request: Any, registry) -> bool:
    raw = request[REQ_RAW_BODY] if REQ_RAW_BODY in request else await request.read()
    try:
        name = loads_strict(raw).get("verb")
    except (InvalidJson, AttributeError):
        return False
    verb = registry.get(name) if isinstance(name, str) else None
    return verb is not None and verb.policy.risk_class is RiskClass.READ


def remote_authenticator(base: Authenticator, registry) -> Authenticator:
    """Wrap the verbs authenticator with agent signatures, anonymous reads and ``Verb-Surface``."""

    async def authenticate(pool: asyncpg.Pool, company, authorization: str | None, request: Any):
        surface = _surface(request)
        p = await base(pool, company, authorization, request)
        if p is not None:
            return replace(p, transport=surface)
        if authorization:
            return None  # a wrong token never falls back to a weaker identity
        verified = request.get(REQ_PRINCIPAL) if request is not None else None
        if getattr(verified, "authenticated", False) and getattr(verified, "profile_url", None):
            role = await _agent_role(pool, company.id, verified.profile_url)
            kind = "buyer" if role == "buyer" else "agent"
            return Principal(kind, company.id, role, str(verified.profile_url), surface)
        if surface == "mcp_stdio" and request is not None and await _requested_verb_is_read(request, registry):
            return Principal("buyer", company.id, "buyer", "anonymous", surface)
        return None

    return authenticate

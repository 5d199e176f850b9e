"""The non-signature platform proofs, as ``httpsig.web.PROOF_VERIFIERS`` entries (docs/access.md).

Each returns None when its proof is absent, the :class:`~ucp_gateway.httpsig.web.AgentPrincipal`
of the credential's partner (``identified``) when it checks out, and raises 401 when it is present
but wrong: unknown, revoked, expired, or another company's (RLS: it is not found). A ``UCP-Agent``
naming another profile than the credential's partner is refused too (UCP overview "Identity
Binding": the authenticated principal must be the one acting for that profile).

- ``X-API-Key: ucpak_...`` (Google's merchant guide "API key").
- ``Authorization: Bearer ucpot_...``: an access token of :mod:`.oauth`. Staff tokens
  (``ucpat_...``) are left to the routes that take them; any other bearer token is refused.
"""

from __future__ import annotations

import http_sf
from aiohttp import web

from ..appkeys import CLOCK, DATABASE
from ..clock import SystemClock
from ..db import tenant_tx
from ..errors import Unauthorized
from ..httpsig.web import AgentPrincipal
from ..levels import ProofKind
from .credentials import find_api_key, secret_hash
from .oauth import ACCESS_TOKEN_PREFIX

__all__ = ["api_key_proof", "bearer_proof", "bind_profile"]

STAFF_TOKEN_PREFIX = "ucpat_"  # noqa: S105 - keys.admin_tokens' token text


class CredentialInvalid(Unauthorized):
    code = "unauthorized"


def bind_profile(request: web.Request, profile_url: str) -> None:
    """Refuse (401) a ``UCP-Agent`` naming another profile than the credential's partner."""
    header = request.headers.get("UCP-Agent")
    if header is None:
        return
    try:
        profile = http_sf.parse(header.encode("latin-1"), tltype="dictionary").get("profile")
    except Exception:  # the trust and negotiation layers answer a malformed header
        return
    if profile and isinstance(profile[0], str) and profile[0] != profile_url:
        raise CredentialInvalid("the credential's platform is not the UCP-Agent profile")


def _principal(company_id, profile_url: str, cred_id: str, proof: ProofKind) -> AgentPrincipal:
    return AgentPrincipal(company_id, profile_url, cred_id, "buyer", True, "agent", proof)


async def api_key_proof(request: web.Request, company) -> AgentPrincipal | None:
    key = request.headers.get("X-API-Key")
    if key is None:
        return None
    found = await find_api_key(request.app[DATABASE].pool, company.id, key.strip()) if len(key) <= 200 else None
    if found is None:
        raise CredentialInvalid("the API key is not valid for this company")
    bind_profile(request, found[1])
    return _principal(company.id, found[1], found[0], ProofKind.API_KEY)


async def bearer_proof(request: web.Request, company) -> AgentPrincipal | None:
    auth = request.headers.get("Authorization")
    if auth is None or auth[:7].lower() != "bearer ":
        return None
    token = auth[7:].strip()
    if token.startswith(STAFF_TOKEN_PREFIX):
        return None  # a staff token: the admin API, the verb door and /ucp/mcp check it themselves
    if not token.startswith(ACCESS_TOKEN_PREFIX) or len(token) > 200:
        raise CredentialInvalid("the bearer token is not valid for this company")
    now = (request.app.get(CLOCK) or SystemClock()).now()
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        row = await conn.fetchrow(
            "SELECT t.client_id, c.profile_url FROM oauth_access_tokens t"
            " JOIN platform_credentials c ON c.id = t.client_id"
            " WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND t.expires_at > $2 AND c.revoked_at IS NULL",
            secret_hash(token),
            now,
        )
    if row is None:
        raise CredentialInvalid("the bearer token is not valid for this company (unknown, expired or revoked)")
    bind_profile(request, row["profile_url"])
    return _principal(company.id, row["profile_url"], row["client_id"], ProofKind.OAUTH)

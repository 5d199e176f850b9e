"""Wiring of platform access into the app (one ``app.COMPONENTS`` entry, after the signature layer).

Admin routes (``Authorization: Bearer ucpat_...``)::

    GET  /admin/v1/access                           read_only   policy, access table, log-policy counters (7 days)
    PUT  /admin/v1/access/policy                    admin       {"signature_policy": one of the policies}
    GET  /admin/v1/partners/credentials             read_only   the partners' credentials (never a secret)
    POST /admin/v1/partners/credentials             admin       {"kind", "profile_url", "label"?, "jwks"?,
                                                                "identity"?}: the secret, once (none with jwks:
                                                                private_key_jwt, nor for an identity)
    POST /admin/v1/partners/credentials/{id}/revoke admin       final; an OAuth client's tokens die with it

A policy change reaches every replica within ``host_cache_ttl`` seconds (the host cache), no restart.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, SETTINGS
from ..clock import SystemClock
from ..company_settings import access_levels, setting
from ..db import tenant_tx
from ..errors import BadRequest
from ..httpsig.web import POLICY_COUNTER, PROOF_VERIFIERS, effective_mode
from ..keys.admin_tokens import StaffPrincipal
from ..keys.web import admin_route
from ..levels import DEFAULT_LEVELS, STRICT_LEVELS
from ..logs import get_logger
from ..mediatype import read_json_object
from ..tenancy import SIGNATURE_POLICIES, get_company
from . import oauth
from .counts import count_refusal, refusal_counts
from .credentials import add_credential, list_credentials, revoke_credential
from .mtls import CLIENT_TRUST, ClientTrust, mtls_proof
from .proofs import api_key_proof, bearer_proof
from .wba_directory import DirectoryFetcher
from .webbotauth import DIRECTORY_FETCHER, web_bot_auth_proof

__all__ = ["setup"]

_log = get_logger("ucp_gateway.access")


def _today(request: web.Request) -> dt.date:
    return (request.app.get(CLOCK) or SystemClock()).now().astimezone(dt.UTC).date()


async def _count(request: web.Request, company, reason: str) -> None:
    """``httpsig.web.POLICY_COUNTER``: one more ``reason`` for the company today, and a log line."""
    _log.info("signature_policy_log", company=company.slug, reason=reason, path=request.path)
    await count_refusal(request.app[DATABASE].pool, company.id, _today(request), reason)


@admin_route("read_only")
async def access_get(request: web.Request, p: StaffPrincipal) -> Any:
    pool = request.app[DATABASE].pool
    company = await get_company(pool, str(p.company_id))
    table = setting(company, "access.levels", access_levels, default=DEFAULT_LEVELS, on_bad=STRICT_LEVELS)
    settings = request.app[SETTINGS]
    return {
        "signature_policy": company.signature_policy,
        "effective_policy": effective_mode(company.signature_policy, settings.dev_mode),
        "levels": {op: str(level) for op, level in table.items()},
        "log_policy_counts": await refusal_counts(pool, p.company_id, _today(request) - dt.timedelta(days=6)),
    }


@admin_route("admin")
async def policy_put(request: web.Request, p: StaffPrincipal) -> Any:
    data = await read_json_object(request, example='{"signature_policy": "required"}')
    policy = data.get("signature_policy")
    policy = "required" if policy == "strict" else policy
    if policy not in SIGNATURE_POLICIES:
        raise BadRequest(f"signature_policy must be one of strict, {', '.join(SIGNATURE_POLICIES)}")
    if policy == "off" and not request.app[SETTINGS].dev_mode:
        raise BadRequest("signature_policy off is for development deployments only")
    async with tenant_tx(request.app[DATABASE].pool, p.company_id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = $2 WHERE id = $1", p.company_id, policy)
    _log.info("signature_policy_changed", company_id=str(p.company_id), policy=policy, actor=p.actor)
    return {"signature_policy": policy}


@admin_route("read_only")
async def credentials_get(request: web.Request, p: StaffPrincipal) -> Any:
    return {"credentials": [c.to_json() for c in await list_credentials(request.app[DATABASE].pool, p.company_id)]}


@admin_route("admin")
async def credentials_post(request: web.Request, p: StaffPrincipal) -> Any:
    """Body ``{"kind": "api-key"|"oauth-client", "profile_url", "label"?, "jwks"?}``; the secret is in
    the answer once (an oauth-client given ``jwks``, a public JWK Set or ``jwk``, uses private_key_jwt
    and has none); a ``web-bot-auth`` (``identity``: the directory origin) or ``mtls-cert``
    (``identity``: ``sha256:<fingerprint>`` or ``subject:<RFC 4514 name>``) has no secret either."""
    shape = (
        '{"kind": "api-key"|"oauth-client"|"web-bot-auth"|"mtls-cert", "profile_url": "...",'
        ' "label"?: "...", "identity"?: "..."}'
    )
    data = await read_json_object(request, example=shape)
    if not isinstance(data.get("profile_url"), str):
        raise BadRequest(f"body must be {shape}")
    label, jwks, identity = data.get("label"), data.get("jwks", data.get("jwk")), data.get("identity")
    if jwks is not None and not isinstance(jwks, dict):
        raise BadRequest("jwks must be a JWK Set (or jwk a JWK) object")
    cred, secret = await add_credential(
        request.app[DATABASE].pool, p.company_id, kind=str(data.get("kind")), profile_url=data["profile_url"],
        now=(request.app.get(CLOCK) or SystemClock()).now(), label=label if isinstance(label, str) else None,
        jwks=jwks, identity=identity if isinstance(identity, str) else None,
    )  # fmt: skip
    _log.info("platform_credential_added", company_id=str(p.company_id), id=cred.id, actor=p.actor)
    return {**cred.to_json(), "secret": secret}


@admin_route("admin")
async def credentials_revoke(request: web.Request, p: StaffPrincipal) -> Any:
    cred = await revoke_credential(request.app[DATABASE].pool, p.company_id, request.match_info["id"],
                                   now=(request.app.get(CLOCK) or SystemClock()).now())  # fmt: skip
    _log.info("platform_credential_revoked", company_id=str(p.company_id), id=cred.id, actor=p.actor)
    return cred.to_json()


async def _directories(app: web.Application):
    """The Web Bot Auth key-directory fetcher of this process (closed with the app)."""
    app[DIRECTORY_FETCHER] = fetcher = DirectoryFetcher(app[SETTINGS], clock=app.get(CLOCK))
    try:
        yield
    finally:
        await fetcher.close()


def setup(app: web.Application) -> None:
    """Install the proof verifiers (mTLS, API key, OAuth bearer token, Web Bot Auth: read by the
    signature layer on every request, each returning at once when its proof is absent), the
    log-policy counter, the OAuth authorization server routes (exempt from the signature layer) and
    the admin routes."""
    verifiers = app.setdefault(PROOF_VERIFIERS, [])
    verifiers.extend([mtls_proof, api_key_proof, bearer_proof, web_bot_auth_proof])
    app.cleanup_ctx.append(_directories)
    app[POLICY_COUNTER] = _count
    settings = app[SETTINGS]
    app[CLIENT_TRUST] = ClientTrust(settings)  # for forwarded client certificates
    if "/oauth2/" not in settings.httpsig_exempt_prefixes:
        settings.httpsig_exempt_prefixes = (*settings.httpsig_exempt_prefixes, "/oauth2/")
    oauth.setup_routes(app)
    app.router.add_get("/admin/v1/access", access_get)
    app.router.add_put("/admin/v1/access/policy", policy_put)
    app.router.add_get("/admin/v1/partners/credentials", credentials_get)
    app.router.add_post("/admin/v1/partners/credentials", credentials_post)
    app.router.add_post("/admin/v1/partners/credentials/{id}/revoke", credentials_revoke)
    from .pages import setup_pages  # the staff page of the same credentials (list, revoke)

    setup_pages(app)

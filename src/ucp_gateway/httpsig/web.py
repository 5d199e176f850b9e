"""aiohttp adapter: verify signed requests on company hosts, sign responses.

Installed by :func:`setup`. Request storage it fills (keys from :mod:`ucp_gateway.appkeys` plus
``REQ_SIGNATURE``):

- ``request[REQ_RAW_BODY]``: the body bytes exactly as received (read once, before decoding);
- ``request[REQ_SIGNATURE]``: :class:`.verify.VerifiedSignature` or None (unsigned, allowed);
- ``request[REQ_PRINCIPAL]``: :class:`AgentPrincipal` on verified company routes (admin routes set
  a ``StaffPrincipal`` instead).

The other platform proofs (API keys, OAuth bearer tokens, mTLS, Web Bot Auth) plug in as
``app[PROOF_VERIFIERS]``: each ``async (request, company) -> AgentPrincipal | None`` returns None
when its proof is absent, the principal when it checks out, and raises a 401 GatewayError when it is
present but wrong (never a downgrade); all of them run, and their principals must name one platform.
A verifier that verified the request's signatures itself sets ``request[REQ_SIGNATURE_PROOF]``; an
unauthenticated principal (a verified bot that is no platform) counts as no platform proof for
``required`` and ``log``. A signed request must also bind to the same profile as any
other proof it carries. Every answer on a company's UCP routes echoes the caller's access level
(``UCP-Access-Level``, :mod:`ucp_gateway.levels`).

Signature policies (``companies.signature_policy``): ``required`` (also spelt ``strict``) refuses a
request without a valid proof, except on open doors (``appkeys.open_door``); ``optional`` lets an
unsigned request through as ``anonymous`` (a present proof is still verified); ``log`` answers as
``optional`` does but counts, with the reason, every request ``required`` would have refused,
a wrong proof included (it is then served as ``anonymous``, never as its claim); ``off`` verifies
nothing (development only; elsewhere it is ``required``).

URL components come from the configured scheme + the Host (allow-listed: it resolved to a company)
+ ``request.raw_path``; header lines are taken raw in wire order (RFC 9421 §7.4.3, pitfalls 4-8).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import lru_cache
from uuid import UUID

import aiohttp
from aiohttp import web

from .. import metrics
from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, REQ_PRINCIPAL, REQ_RAW_BODY, SETTINGS, is_human_page, is_open_door
from ..clock import SystemClock
from ..company_settings import boolean, setting
from ..config import Settings
from ..db import COMMIT_PROBE, CommitProbe
from ..errors import BadRequest, GatewayError
from ..levels import ACCESS_LEVEL_HEADER, AccessLevel, ProofKind
from ..mediatype import json_response
from ..tenancy import resolve_host
from .blocks import BlockCache
from .errors import KeyNotFound, SignatureInvalid, SignatureMissing
from .fused import verify_fused
from .messages import canonical_path, request_view, sign_response
from .policy import SignaturePolicy
from .replay import PgReplayStore, ReplayStore
from .resolver import KeyResolver, ProfileKeyResolver
from .signkey import SigningKeys
from .verify import frozen_constructor, verify_request

__all__ = [
    "BLOCK_CACHE",
    "KEY_RESOLVER",
    "POLICY_COUNTER",
    "PROOF_VERIFIERS",
    "REPLAY_STORE",
    "REQ_SIGNATURE",
    "REQ_SIGNATURE_PROOF",
    "REQ_SIGN_RESPONSE",
    "AgentPrincipal",
    "count_policy_refusal",
    "effective_mode",
    "mark_for_signing",
    "policy_from_settings",
    "setup",
    "signature_middleware",
]

log = logging.getLogger(__name__)

REQ_SIGNATURE = web.RequestKey("signature", object)  # VerifiedSignature | None
REQ_SIGN_RESPONSE = web.RequestKey("sign_response", bool)
_REQ_KEY_PROBE = web.RequestKey("ucpgw.sign_key_probe", CommitProbe)  # confirms the cached signing key
_SIGNING_KEYS = web.AppKey("ucpgw.signing_keys", SigningKeys)
#: The app's caller-key resolver (the discovery package sets its profile fetcher here).
KEY_RESOLVER = web.AppKey("ucpgw.key_resolver", KeyResolver)  # type: ignore[type-abstract]
REPLAY_STORE = web.AppKey("ucpgw.replay_store", PgReplayStore)
_DEFAULT_RESOLVER = web.AppKey("ucpgw.httpsig.default_resolver", ProfileKeyResolver)
BLOCK_CACHE = web.AppKey("ucpgw.httpsig.block_cache", BlockCache)  # the company blocks (.blocks)
#: ``async (request, company) -> AgentPrincipal | None`` each; see the module docstring
PROOF_VERIFIERS = web.AppKey("ucpgw.proof_verifiers", list)
#: True once a proof verifier verified the request's signatures itself (Web Bot Auth): the
#: signature layer then verifies no RFC 9421 signature against the UCP-Agent profile
REQ_SIGNATURE_PROOF = web.RequestKey("ucpgw.signature_proof", bool)
_NO_PLATFORM = (
    "the request's signature identifies a bot, not a platform of this business: register its key directory"
    " (partners credentials add --kind web-bot-auth) or sign as a UCP platform"
)
#: ``async (request, company, reason_code) -> None``: what ``log`` policy served that ``required`` refuses
POLICY_COUNTER = web.AppKey("ucpgw.policy_counter", object)


@dataclass(frozen=True, slots=True)
class AgentPrincipal:
    """A caller on a company's UCP routes.

    ``role`` is ``buyer`` for a verified platform (outside the staff ladder, docs/architecture.md)
    and ``read_only`` (the lowest role) for an unsigned caller under ``optional``/``off`` policy.
    ``proof``: a :class:`~ucp_gateway.levels.ProofKind` value; ``kid``: the signature's key id, or the
    id of the credential that proved it (API key, OAuth client).
    """

    company_id: UUID
    profile_url: str | None
    kid: str | None
    role: str
    authenticated: bool
    kind: str = "agent"
    proof: str = ProofKind.NONE

    @property
    def level(self) -> AccessLevel:
        """``identified`` for a verified proof, else ``anonymous``."""
        return AccessLevel.IDENTIFIED if self.authenticated else AccessLevel.ANONYMOUS


_principal = frozen_constructor(AgentPrincipal)
_SIGNED = ProofKind.SIGNATURE


def effective_mode(signature_policy: str, dev_mode: bool) -> str:
    """``required`` | ``optional`` | ``log`` | ``off``: ``strict`` is ``required``; ``off`` is honoured
    only in dev mode; anything else fails closed to ``required``."""
    if signature_policy == "off" and not dev_mode:
        return "required"
    return signature_policy if signature_policy in ("required", "optional", "log", "off") else "required"


def policy_from_settings(s: Settings) -> SignaturePolicy:
    """The verification policy of settings ``s`` (one shared frozen instance per distinct value set:
    settings may be changed at runtime, so they are read on every call, but nothing is rebuilt)."""
    return _policy(
        s.httpsig_max_age,
        s.httpsig_future_skew,
        s.httpsig_require_created,
        s.httpsig_tag,
        s.httpsig_allow_es384,
        s.dev_mode,
    )


@lru_cache(maxsize=8)
def _policy(
    max_age: int, future_skew: int, require_created: bool, tag: str | None, es384: bool, dev: bool
) -> SignaturePolicy:
    return SignaturePolicy(
        max_age=max_age,
        future_skew=future_skew,
        require_created=require_created,
        tag=tag,
        allow_es384=es384,
        allow_http_profiles=dev,
    )


def mark_for_signing(request: web.Request) -> None:
    """Ask the middleware to sign this request's response (e.g. complete_checkout). Call it before
    the request's tenant transaction, so that its COMMIT can confirm the cached signing key."""
    request[REQ_SIGN_RESPONSE] = True
    probe = request.get(_REQ_KEY_PROBE)
    if probe is not None:
        probe.armed = True


def _error_response(exc: GatewayError) -> web.Response:
    return json_response(exc.to_body(), status=exc.http_status)


def _wants_signature(request: web.Request, company, settings: Settings) -> bool:
    return bool(
        request[REQ_SIGN_RESPONSE]  # set False by the middleware before the handler runs
        or "Accept-Signature" in request.headers
        or settings.httpsig_sign_responses
        # a value that is no boolean fails closed as true: signing is the stricter choice (the
        # platform gets the signatures the operator may have meant), not signing would drop them
        or setting(company, "sign_responses", boolean, default=False, on_bad=True)
    )


async def _other_proof(app: web.Application, request: web.Request, company) -> AgentPrincipal | None:
    """The principal of the non-signature proofs present (``app[PROOF_VERIFIERS]``), or None.

    Every verifier runs (each returns at once when its proof is absent), so that every proof a
    request carries is checked: a wrong one raises its 401 even beside a right one. An
    ``authenticated`` principal wins over one that is not (a verified Web Bot Auth bot); two
    authenticated ones must name the same platform (UCP overview "Identity Binding")."""
    found: AgentPrincipal | None = None
    for verify in app.get(PROOF_VERIFIERS, ()):
        principal = await verify(request, company)
        if principal is None:
            continue
        if found is None or (principal.authenticated and not found.authenticated):
            found = principal
        elif principal.authenticated and principal.profile_url != found.profile_url:
            raise SignatureInvalid("the request's proofs name different platforms")
    return found


async def _verify_signature(
    app: web.Application, request: web.Request, settings: Settings, clock, body: bytes, company_id: UUID
):
    """The request's RFC 9421 signature, verified (UCP signatures.md), by a key and from a profile the
    company has not blocked (:mod:`.blocks`: 401 key_not_found). Raises the signature errors."""
    # read first: it also applies the company's profile purges to the caches the verifier reads
    blocks = await app[BLOCK_CACHE].get(app[DATABASE].pool, company_id)
    resolver = app.get(KEY_RESOLVER) or app[_DEFAULT_RESOLVER]
    replay: ReplayStore | None = app.get(REPLAY_STORE)
    policy, now, scheme = policy_from_settings(settings), clock.now(), settings.public_scheme
    headers = request.headers
    # the usual request in one pass; anything else (None) through the reference path
    url = f"{scheme}://{headers.get('Host') or request.host}{request.raw_path}"  # as request_view
    sig = await verify_fused(headers, request.method, url, body, resolver, policy, now, replay)
    if sig is None:
        sig = await verify_request(request_view(request, body, scheme), resolver, policy, now, replay)
    if blocks.key_blocked(sig.kid, sig.jwk) or sig.profile_url in blocks.profiles:
        raise KeyNotFound("this signing key is blocked by the business")
    return sig


async def count_policy_refusal(request: web.Request, company, reason: str) -> None:
    """Record that ``log`` policy served a request ``required`` would refuse with ``reason`` (a wire
    code such as ``signature_missing``), through ``app[POLICY_COUNTER]`` when one is installed."""
    counter = request.app.get(POLICY_COUNTER)
    if counter is not None:
        await counter(request, company, reason)  # type: ignore[operator]


def _staff_bearer(request: web.Request, settings: Settings) -> bool:
    """An unsigned call on a staff route carrying ``Authorization: Bearer ...``."""
    auth = request.headers.get("Authorization", "")
    return auth[:7].lower() == "bearer " and request.path.startswith(tuple(settings.httpsig_staff_prefixes))


@web.middleware
async def signature_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Verify per the company's ``signature_policy``; sign responses when asked. Errors are
    rendered here as ``{"code","content"}`` with the UCP status, never as 500."""
    app = request.app
    settings: Settings = app[SETTINGS]
    if request.match_info.http_exception is not None:
        return await handler(request)  # no such route (404/405): nothing to verify
    if not request.body_exists:  # no Content-Length / Transfer-Encoding: nothing to wait for
        body = b""
    elif request.content.is_eof():  # the whole body is already buffered: reading cannot wait
        body = await request.read()
    else:
        try:
            # a client that announces more body than it sends must not hold a handler forever
            async with asyncio.timeout(settings.body_read_timeout):
                body = await request.read()
        except TimeoutError:
            return json_response(
                {"code": "request_timeout", "content": "request body not received in time"}, status=408
            )
    request[REQ_RAW_BODY] = body
    company = request[REQ_COMPANY] if REQ_COMPANY in request else await resolve_host(app[DATABASE].pool, request.host)
    request[REQ_SIGNATURE] = None
    if (
        company is None
        or request.path.startswith(tuple(settings.httpsig_exempt_prefixes))
        or is_human_page(request.match_info.handler)
    ):
        return await handler(request)
    raw_path = request.raw_path
    if ("." in raw_path or "%2" in raw_path) and not canonical_path(raw_path):  # most paths have neither
        return _error_response(BadRequest("non-canonical request path (dot segments)"))
    clock = app.get(CLOCK) or SystemClock()
    mode = effective_mode(company.signature_policy, settings.dev_mode)
    headers = request.headers
    signed = "Signature-Input" in headers or "Signature" in headers
    if not signed and _staff_bearer(request, settings):
        # Company staff authenticate with an admin API token on the staff routes; the route's
        # handler verifies it (401 otherwise), so no signature is asked of them.
        return await handler(request)
    principal: AgentPrincipal | None = None
    if mode != "off":
        try:
            other = await _other_proof(app, request, company)
            # a proof that verified the request's signatures itself (Web Bot Auth) leaves none here
            ucp_signed = signed and not request.get(REQ_SIGNATURE_PROOF, False)
            platform = other is not None and other.authenticated
            if ucp_signed or (not platform and mode == "required" and not is_open_door(request.match_info.handler)):
                if not ucp_signed and other is not None:  # a verified bot that is no platform here
                    raise SignatureMissing(_NO_PLATFORM)
                sig = await _verify_signature(app, request, settings, clock, body, company.id)
                if other is not None and other.profile_url != sig.profile_url:
                    # UCP overview "Identity Binding": every proof must name the same platform
                    raise SignatureInvalid("the request's proofs name different platforms")
                request[REQ_SIGNATURE] = sig
                principal = _principal(company.id, sig.profile_url, sig.kid, "buyer", True, "agent", _SIGNED)
            else:
                principal = other
                if not platform and mode == "log" and not is_open_door(request.match_info.handler):
                    raise SignatureMissing("request is not signed" if other is None else _NO_PLATFORM)
        except GatewayError as exc:
            metrics.SIGNATURES.labels(_SIGNED if signed else "other", exc.code).inc()
            log.info("signature rejected", extra={"code": exc.code, "company": company.slug})
            if mode != "log":
                if exc.code == "signature_missing" and request.path.startswith(tuple(settings.httpsig_staff_prefixes)):
                    # a staff route: the caller more likely lacks its admin API token than a signature
                    exc = type(exc)("request is not signed; staff send Authorization: Bearer <admin API token> instead")
                return _error_response(exc)
            await count_policy_refusal(request, company, exc.code)  # log: served as anonymous, counted
            principal = None
            request[REQ_SIGNATURE] = None
    if principal is None:
        principal = AgentPrincipal(company.id, None, None, "read_only", False)
    metrics.SIGNATURES.labels(principal.proof, "verified" if principal.authenticated else "anonymous").inc()
    request[REQ_PRINCIPAL] = principal
    request[REQ_SIGN_RESPONSE] = False
    keys = app.get(_SIGNING_KEYS)
    probe = keys.probe(company.id) if keys is not None else None
    if probe is None:
        response = await handler(request)
    else:  # armed now when the response will be signed anyway, or by mark_for_signing in the handler
        probe.armed = _wants_signature(request, company, settings)
        request[_REQ_KEY_PROBE] = probe
        token = COMMIT_PROBE.set(probe)
        try:
            response = await handler(request)
        finally:
            COMMIT_PROBE.reset(token)
    if ACCESS_LEVEL_HEADER not in response.headers:
        response.headers[ACCESS_LEVEL_HEADER] = principal.level
    if isinstance(response, web.Response) and _wants_signature(request, company, settings):
        pool = app[DATABASE].pool
        try:
            now = clock.now()
            key = await keys.key(pool, company.id, probe, now=now) if keys is not None else None
            await sign_response(
                request, response, pool=pool, company_id=company.id, now=now, scheme=settings.public_scheme, key=key
            )
        except GatewayError as exc:  # no active key: fail closed rather than send unsigned
            metrics.RESPONSE_SIGNATURES.labels(exc.code).inc()
            return _error_response(exc)
        metrics.RESPONSE_SIGNATURES.labels("signed").inc()
    return response


async def _httpsig_ctx(app: web.Application) -> AsyncIterator[None]:
    s = app[SETTINGS]
    session = aiohttp.ClientSession()
    app[_DEFAULT_RESOLVER] = ProfileKeyResolver(
        session, ttl=s.httpsig_profile_ttl, refresh_floor=s.httpsig_profile_refresh_floor
    )
    if REPLAY_STORE not in app:
        app[REPLAY_STORE] = PgReplayStore(app[DATABASE].pool)
    try:
        yield
    finally:
        await session.close()


def setup(app: web.Application) -> None:
    """Install the signature middleware and its resources (one line in ``app.COMPONENTS``).

    Needs request decompression off (``create_app`` passes ``auto_decompress=False``): Content-Digest covers the
    content as transferred (RFC 9530 §2), so the body must be hashed before any decoding.
    """
    app.middlewares.append(signature_middleware)
    app[_SIGNING_KEYS] = SigningKeys()

    def purge(url: str) -> None:  # the profile caches of this app (discovery's fetcher, if installed)
        for cache in (app.get(KEY_RESOLVER), app.get(_DEFAULT_RESOLVER)):
            drop = getattr(cache, "purge", None)
            if drop is not None:
                drop(url)

    app[BLOCK_CACHE] = BlockCache(app[SETTINGS].block_cache_ttl, purgers=[purge])
    app.cleanup_ctx.append(_httpsig_ctx)

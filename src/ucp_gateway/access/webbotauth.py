"""Web Bot Auth: a signature whose key comes from the signer's ``Signature-Agent`` key directory.

draft-meunier-web-bot-auth-architecture and draft-meunier-http-message-signatures-directory, on
the gateway's RFC 9421 engine (:mod:`ucp_gateway.httpsig`). A signature is Web Bot Auth when its
``tag`` is ``web-bot-auth``; this proof claims only those, and checks (each failure a 401, never a
downgrade):

- ``keyid``, ``created`` and ``expires`` present (integers); ``expires`` not past, ``created`` not
  in the future (``httpsig_future_skew``) nor older than ``httpsig_max_age``, and ``expires -
  created`` at most ``web_bot_auth_max_validity`` seconds (a short window);
- ``@authority`` (or ``@target-uri``) covered;
- a ``Signature-Agent`` header, covered: the whole field, or the Dictionary member the key names
  (``"signature-agent";key="sig1"``, RFC 9421 §2.1.2); the member (or a legacy bare string) is an
  https URL with ``type`` ``directory`` (the default: origin +
  ``/.well-known/http-message-signatures-directory``) or ``jwks_uri`` (the URL itself);
- the ``keyid`` is the RFC 7638 thumbprint of an Ed25519 or P-256 key in that directory
  (:mod:`.wba_directory`; an unreachable directory is 503 with Retry-After, an outage, not a wrong
  proof), not blocked by the company (``blocks``); a differing ``alg`` is refused;
- ``Content-Digest`` matches the body when covered; the signature verifies; a ``nonce`` is new
  (the shared replay store, kept until ``expires``).

Who the verified signer is to the company (docs/access.md "Web Bot Auth"):

- a **registered directory** (``partners credentials add --kind web-bot-auth --directory ORIGIN``)
  names its partner: ``identified`` as that partner's profile (a ``UCP-Agent`` naming another
  profile is refused, identity binding);
- else a directory on the **origin of the ``UCP-Agent`` profile** is that profile's key source:
  ``identified`` as that profile, as an RFC 9421 signature against the profile's keys would be;
- either only when the signature also covers what UCP requires of a platform signature (the
  coverage gate: ``@method @authority @path``, ``@query``, ``ucp-agent``, ``idempotency-key``,
  ``content-digest content-type`` as the request has them); otherwise, or for any other directory,
  the signer is a **verified bot**: an unauthenticated principal (``anonymous``, proof
  ``web_bot_auth``, ``kid`` its keyid), served under signature policy ``optional``; the signature
  layer refuses it under ``required`` (401 ``signature_missing``) except on the open doors, and
  counts it under ``log``, as a request without a platform proof.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlsplit

import http_sf
from aiohttp import web

from ..appkeys import CLOCK, DATABASE, REQ_RAW_BODY, SETTINGS
from ..clock import SystemClock
from ..db import tenant_tx
from ..errors import GatewayError
from ..httpsig.errors import AlgorithmUnsupported, KeyNotFound, SignatureInvalid
from ..httpsig.jwkalg import algorithm_for_jwk, algorithm_instance
from ..httpsig.messages import request_view
from ..httpsig.policy import check_times, missing_components, required_components
from ..httpsig.replay import ReplayStore
from ..httpsig.rfc9421 import ParsedSignature, parse_signatures, verify_signature
from ..httpsig.rfc9530 import check_content_digest
from ..httpsig.web import (
    BLOCK_CACHE,
    REPLAY_STORE,
    REQ_SIGNATURE_PROOF,
    AgentPrincipal,
    policy_from_settings,
)
from ..levels import ProofKind
from .identities import origin_of
from .proofs import bind_profile
from .wba_directory import DIRECTORY_PATH, DirectoryFetcher

__all__ = ["DIRECTORY_FETCHER", "WBA_TAG", "WebBotAuthSignature", "agent_directory", "web_bot_auth_proof"]

WBA_TAG = "web-bot-auth"
DIRECTORY_FETCHER = web.AppKey("ucpgw.access.wba_directories", DirectoryFetcher)
_AUTHORITY = ('"@authority"', '"@target-uri"')


class WebBotAuthSignature:
    """A verified Web Bot Auth signature: ``keyid`` (RFC 7638 thumbprint), ``agent`` (the
    Signature-Agent URL), ``origin`` (its origin), ``components`` (covered, in signed order),
    ``jwk`` (the public key)."""

    __slots__ = ("agent", "components", "jwk", "keyid", "origin")

    def __init__(self, keyid: str, agent: str, origin: str, components: tuple[str, ...], jwk: dict[str, Any]):
        self.keyid, self.agent, self.origin, self.components, self.jwk = keyid, agent, origin, components, jwk


def agent_directory(header: str, components: tuple[str, ...]) -> tuple[str, str]:
    """``(Signature-Agent URL, directory URL to fetch)`` for a signature covering ``components``.

    ``header``: the combined Signature-Agent field: an RFC 8941 Dictionary ``label="<url>";type=...``
    or a legacy bare sf-string. The member used is the one a covered ``;key=`` names, or the only
    member when the whole field is covered. Raises SignatureInvalid (not covered, no such member,
    not a URL, unknown ``type``)."""
    keys = []
    for c in components:
        if c.startswith('"signature-agent";'):
            try:
                _, params = http_sf.parse(c.encode("ascii"), tltype="item")
            except Exception:
                raise SignatureInvalid("malformed signature-agent component") from None
            if isinstance(params.get("key"), str):
                keys.append(params["key"])
    whole = '"signature-agent"' in components
    if not keys and not whole:
        raise SignatureInvalid("a Web Bot Auth signature must cover the Signature-Agent header")
    raw = header.encode("latin-1", "replace")
    try:
        members: dict = http_sf.parse(raw, tltype="dictionary")
    except Exception:
        try:
            members = {"": http_sf.parse(raw, tltype="item")}
        except Exception:
            raise SignatureInvalid("Signature-Agent is not a structured field") from None
    if "" in members and not whole:
        raise SignatureInvalid("a Web Bot Auth signature must cover the Signature-Agent header")
    if keys:
        if keys[0] not in members:
            raise SignatureInvalid("the covered Signature-Agent member is not in the header")
        value, params = members[keys[0]]
    elif len(members) == 1:
        value, params = next(iter(members.values()))
    else:
        raise SignatureInvalid("Signature-Agent has several members: cover the one used with ;key=")
    kind = params.get("type", "directory")
    if not isinstance(value, str) or urlsplit(value).scheme.lower() not in ("https", "http"):
        raise SignatureInvalid("the Signature-Agent member is not an https URL")
    if str(kind) == "jwks_uri":
        return value, value
    if str(kind) != "directory":
        raise SignatureInvalid(f"Signature-Agent type {kind} is not supported (directory, jwks_uri)")
    return value, origin_of(value) + DIRECTORY_PATH


async def verify_web_bot_auth(
    request: web.Request, company_id, sig: ParsedSignature, fetcher: DirectoryFetcher, now: dt.datetime
) -> WebBotAuthSignature:
    """Verify one ``tag="web-bot-auth"`` signature of ``request`` (the checks of the module
    docstring). Raises SignatureInvalid / KeyNotFound (401), AlgorithmUnsupported (400),
    DigestMismatch (400), DirectoryUnavailable (503)."""
    app = request.app
    settings = app[SETTINGS]
    policy = policy_from_settings(settings)
    p, keyid, comps = sig.params, sig.keyid, sig.components
    created, expires = p.get("created"), p.get("expires")
    if not keyid:
        raise SignatureInvalid("a Web Bot Auth signature needs a keyid (its key's RFC 7638 thumbprint)")
    if type(created) is not int or type(expires) is not int:
        raise SignatureInvalid("a Web Bot Auth signature needs integer created and expires parameters")
    ts = now.timestamp()
    check_times(created, expires, isinstance(p.get("nonce"), str), policy, ts)
    if expires - created > settings.web_bot_auth_max_validity:
        raise SignatureInvalid(f"the signature is valid for more than {settings.web_bot_auth_max_validity} s")
    if not any(c in comps for c in _AUTHORITY):
        raise SignatureInvalid("a Web Bot Auth signature must cover @authority")
    lines = request.headers.getall("Signature-Agent", None)
    if lines is None:
        raise SignatureInvalid("a Web Bot Auth signature needs a Signature-Agent header naming its key directory")
    agent, directory = agent_directory(", ".join(lines), comps)
    jwk = await fetcher.key(directory, keyid)
    if jwk is None:
        raise KeyNotFound("signature key not found in the agent's key directory")
    blocks = await app[BLOCK_CACHE].get(app[DATABASE].pool, company_id)
    if blocks.key_blocked(keyid, jwk):
        raise KeyNotFound("this signing key is blocked by the business")
    alg_cls, _ = algorithm_for_jwk(jwk)
    if "alg" in p and p["alg"] != alg_cls.algorithm_id:
        raise AlgorithmUnsupported("the alg parameter does not match the key")
    body = request.get(REQ_RAW_BODY, b"")
    if '"content-digest"' in comps:
        check_content_digest(request.headers.get("Content-Digest"), body)
    verify_signature(request_view(request, body, settings.public_scheme), sig, algorithm_instance(jwk))
    nonce = p.get("nonce")
    replay: ReplayStore | None = app.get(REPLAY_STORE)
    if isinstance(nonce, str) and replay is not None:
        ttl = max(1, int(expires - ts)) + policy.future_skew  # the nonce is fresh until expires
        if not await replay.remember(keyid, nonce, now=now, ttl=ttl):
            raise SignatureInvalid("signature nonce was already used")
    return WebBotAuthSignature(keyid, agent, origin_of(agent), comps, jwk)


def passes_ucp_gate(request: web.Request, components: tuple[str, ...]) -> bool:
    """Whether ``components`` cover what UCP requires of a platform's request signature."""
    qs = request.raw_path.partition("?")[2]
    required = required_components(
        request.method,
        has_query=bool(qs),
        has_ucp_agent="UCP-Agent" in request.headers,
        has_body=bool(request.get(REQ_RAW_BODY)),
    )
    return not missing_components(components, required)


async def _registered(pool, company_id, origin: str) -> tuple[str, str] | None:
    """``(credential id, partner profile URL)`` of the live directory registration, or None."""
    async with tenant_tx(pool, company_id) as conn:
        row = await conn.fetchrow(
            "SELECT id, profile_url FROM platform_credentials"
            " WHERE kind = 'web_bot_auth' AND identity = $1 AND revoked_at IS NULL ORDER BY created_at LIMIT 1",
            origin,
        )
    return (row["id"], row["profile_url"]) if row else None


def _ucp_agent_profile(request: web.Request) -> str | None:
    header = request.headers.get("UCP-Agent")
    if header is None:
        return None
    try:
        member = http_sf.parse(header.encode("latin-1"), tltype="dictionary").get("profile")
    except Exception:
        return None
    return member[0] if member and isinstance(member[0], str) else None


async def web_bot_auth_proof(request: web.Request, company) -> AgentPrincipal | None:
    """``httpsig.web.PROOF_VERIFIERS`` entry: None without a ``web-bot-auth`` signature, else the
    principal of the module docstring. Raises its 401s (and 503 for an unreachable directory)."""
    lines = request.headers.getall("Signature-Input", None)
    if lines is None:
        return None
    si = lines[0] if len(lines) == 1 else ", ".join(lines)
    if WBA_TAG not in si:
        return None
    sig_lines = request.headers.getall("Signature", None)
    if sig_lines is None:
        raise SignatureInvalid("Signature and Signature-Input must both be present")
    sigs = [s for s in parse_signatures(si, ", ".join(sig_lines)) if s.params.get("tag") == WBA_TAG]
    if not sigs:
        return None
    app = request.app
    now = (app.get(CLOCK) or SystemClock()).now()
    first: GatewayError | None = None
    for sig in sigs:  # an attacker may add signatures; one that verifies is enough (RFC 9421 §7.2.6)
        try:
            verified = await verify_web_bot_auth(request, company.id, sig, app[DIRECTORY_FETCHER], now)
            break
        except (SignatureInvalid, KeyNotFound, AlgorithmUnsupported) as exc:
            first = first or exc
    else:
        assert first is not None
        raise first
    request[REQ_SIGNATURE_PROOF] = True  # the signature layer verifies no RFC 9421 signature then
    gate = passes_ucp_gate(request, verified.components)
    registered = await _registered(app[DATABASE].pool, company.id, verified.origin)
    if registered is not None and gate:
        bind_profile(request, registered[1])
        return AgentPrincipal(company.id, registered[1], registered[0], "buyer", True, "agent", ProofKind.WEB_BOT_AUTH)
    claimed = _ucp_agent_profile(request)
    if registered is None and gate and claimed is not None and origin_of(claimed) == verified.origin:
        return AgentPrincipal(company.id, claimed, verified.keyid, "buyer", True, "agent", ProofKind.WEB_BOT_AUTH)
    return AgentPrincipal(company.id, None, verified.keyid, "read_only", False, "agent", ProofKind.WEB_BOT_AUTH)

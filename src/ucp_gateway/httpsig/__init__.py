"""RFC 9421 HTTP Message Signatures and RFC 9530 Content-Digest for the gateway (UCP signatures.md).

Public API::

    KeyResolver, StaticKeyResolver, ProfileKeyResolver          # caller keys by (profile_url, kid)
    verify_request(view, resolver, policy, now, replay_store) -> VerifiedSignature
    RequestView, ResponseView, SignaturePolicy, PgReplayStore, MemoryReplayStore
    sign_response(request, response, pool=, company_id=, now=, scheme=)   # aiohttp
    sign_webhook_request(pool, company_id, url=, body=, ucp_agent=, webhook_id=, ...) -> headers
    setup(app)       # middleware; request keys REQ_SIGNATURE (+ appkeys REQ_RAW_BODY, REQ_PRINCIPAL)
    decoded_body(request)  # REQ_RAW_BODY with Content-Encoding undone (decompression is off app-wide)
    mark_for_signing(request)  # sign this response (complete_checkout); KEY_RESOLVER app key
    errors: SignatureMissing, SignatureInvalid, KeyNotFound (401); DigestMismatch,
            AlgorithmUnsupported, InvalidProfileUrl (400); ProfileUnreachable (424)
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from uuid import UUID

from .errors import (
    AlgorithmUnsupported,
    DigestMismatch,
    InvalidProfileUrl,
    KeyNotFound,
    ProfileUnreachable,
    SignatureError,
    SignatureInvalid,
    SignatureMissing,
)
from .messages import decoded_body, sign_response
from .policy import SignaturePolicy
from .replay import MemoryReplayStore, PgReplayStore, ReplayStore
from .resolver import KeyResolver, ProfileKeyResolver, StaticKeyResolver
from .rfc9421 import RequestView, ResponseView
from .rfc9530 import check_content_digest, content_digest
from .signing import webhook_signature_headers
from .verify import VerifiedSignature, verify_request
from .web import (
    KEY_RESOLVER,
    REPLAY_STORE,
    REQ_SIGN_RESPONSE,
    REQ_SIGNATURE,
    AgentPrincipal,
    mark_for_signing,
    setup,
)

__all__ = [
    "KEY_RESOLVER",
    "REPLAY_STORE",
    "REQ_SIGNATURE",
    "REQ_SIGN_RESPONSE",
    "AgentPrincipal",
    "AlgorithmUnsupported",
    "DigestMismatch",
    "InvalidProfileUrl",
    "KeyNotFound",
    "KeyResolver",
    "MemoryReplayStore",
    "PgReplayStore",
    "ProfileKeyResolver",
    "ProfileUnreachable",
    "ReplayStore",
    "RequestView",
    "ResponseView",
    "SignatureError",
    "SignatureInvalid",
    "SignatureMissing",
    "SignaturePolicy",
    "StaticKeyResolver",
    "VerifiedSignature",
    "check_content_digest",
    "content_digest",
    "decoded_body",
    "mark_for_signing",
    "setup",
    "sign_response",
    "sign_webhook_request",
    "verify_request",
]


async def sign_webhook_request(
    pool: Any,
    company_id: UUID,
    *,
    url: str,
    body: bytes,
    ucp_agent: str,
    webhook_id: str,
    webhook_timestamp: str,
    now: dt.datetime,
    content_type: str = "application/json",
) -> dict[str, str]:
    """Headers for an outbound webhook POST signed with the company's active key.

    Returns Content-Type, Content-Digest, UCP-Agent, Webhook-Id, Webhook-Timestamp,
    Signature-Input and Signature; POST ``body`` unchanged with them. Raises NoActiveKey.
    """
    from ..keys.active import active_signing_key

    key = await active_signing_key(pool, company_id, now=now)
    return webhook_signature_headers(
        key,
        url=url,
        body=body,
        ucp_agent=ucp_agent,
        webhook_id=webhook_id,
        webhook_timestamp=webhook_timestamp,
        now=now,
        content_type=content_type,
    )

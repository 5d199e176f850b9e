"""Profile documents as values: parsing a fetched platform profile and validating the profiles we serve.

Validation uses the ucp-sdk 0.5.0 (UCP 2026-08-25) pydantic models of the ``ucp`` object:
``ucp_sdk.models.schemas.ucp.PlatformSchema`` for platform profiles and ``BusinessSchema`` for
business profiles; their request-side rules are looser than 2026-04-08's, so a 2026-04-08 platform
profile passes them too (the tests hold our 2026-04-08 leaf to the 0.4.6 models). The key lists
(``keys``, canonical at 2026-08-25, and ``signing_keys``, 2026-04-08; we read both) are checked here
(``kid`` and ``kty`` required, public keys only); an unknown kty/crv/alg is not an error (the
vocabulary is open: SIG "Signature Algorithms"), it fails only a signature that needs it.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic
from ucp_sdk.models.schemas import ucp as ucp_models

from .errors import ProfileMalformed

__all__ = [
    "LENIENT_PROFILES",
    "PRIVATE_JWK_MEMBERS",
    "PlatformProfile",
    "parse_platform_profile",
    "profile_keys",
    "validate_business_profile",
    "validate_platform_profile",
]

_log = logging.getLogger(__name__)
#: Fetched platform profiles accepted without the entry fields the gateway does not use, by field
#: (``spec``, ``schema``, ``transport``): the largest buyer CLI's default profile lacks them.
LENIENT_PROFILES: Counter[str] = Counter()
_UNUSED_FIELDS = frozenset({"spec", "schema", "transport"})

# JWK members that carry private key material (RFC 7518 §6.2.2, §6.3.2, §6.4; RFC 8037).
PRIVATE_JWK_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


@dataclass(frozen=True, slots=True)
class PlatformProfile:
    """A fetched, validated platform profile.

    Attributes:
        url: where it was fetched from.
        document: the JSON document as received.
        version: ``ucp.version``.
        capabilities: the ``ucp.capabilities`` registry (name -> entries).
        keys: public JWKs from ``signing_keys`` and ``keys`` (first occurrence of a kid wins).
        etag: the origin's ETag, if any (used for conditional refreshes).
    """

    url: str
    document: Mapping[str, Any]
    version: str
    capabilities: Mapping[str, tuple[Mapping[str, Any], ...]]
    keys: tuple[Mapping[str, Any], ...]
    etag: str | None = None
    supported_versions: Mapping[str, str] = field(default_factory=dict)

    def key(self, kid: str) -> dict[str, Any] | None:
        """The public JWK with this ``kid``, as a fresh dict, or None."""
        for k in self.keys:
            if k.get("kid") == kid:
                return dict(k)
        return None


def profile_keys(document: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """Public JWKs of a profile from ``signing_keys`` (2026-04-08) and ``keys`` (2026-08-25).

    Raises: ProfileMalformed when a list is not a list of objects with string ``kid`` and ``kty``, or
        a key carries private material.
    """
    out: dict[str, dict[str, Any]] = {}
    for member in ("signing_keys", "keys"):
        raw = document.get(member)
        if raw is None:
            continue
        if not isinstance(raw, list):
            raise ProfileMalformed(f"{member} must be an array of JWKs")
        for jwk in raw:
            if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str) or not isinstance(jwk.get("kty"), str):
                raise ProfileMalformed(f"{member} entries need string kid and kty")
            if PRIVATE_JWK_MEMBERS & jwk.keys():
                raise ProfileMalformed(f"{member} must hold public keys only")
            out.setdefault(jwk["kid"], dict(jwk))
    return tuple(out.values())


def _errors(exc: pydantic.ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}"


def validate_platform_profile(document: Any) -> None:
    """Check a platform profile against the UCP ``platform_schema`` (ucp-sdk 0.5.0). Raises ProfileMalformed."""
    if not isinstance(document, dict) or not isinstance(document.get("ucp"), dict):
        raise ProfileMalformed("profile must be a JSON object with a ucp object")
    try:
        ucp_models.PlatformSchema.model_validate(document["ucp"])
    except pydantic.ValidationError as exc:
        raise ProfileMalformed(f"profile fails the UCP platform schema at ucp.{_errors(exc)}") from None
    profile_keys(document)


def _fetched_profile_ok(url: str, document: Any) -> None:
    """:func:`validate_platform_profile` for a fetched profile, lenient where the field's clients
    deviate harmlessly: a capability or service entry without ``spec`` / ``schema`` / ``transport``
    (documentation links and the transport of the platform's own services, which negotiation never
    reads) is accepted with a counted warning (:data:`LENIENT_PROFILES`, log ``platform_profile_lenient``).
    Anything else that fails the schema (a missing ``version``, a wrong type) would change what is
    negotiated and stays ProfileMalformed."""
    if not isinstance(document, dict) or not isinstance(document.get("ucp"), dict):
        raise ProfileMalformed("profile must be a JSON object with a ucp object")
    try:
        ucp_models.PlatformSchema.model_validate(document["ucp"])
    except pydantic.ValidationError as exc:
        errors = exc.errors()
        if not all(e.get("type") == "missing" and e.get("loc") and e["loc"][-1] in _UNUSED_FIELDS for e in errors):
            raise ProfileMalformed(f"profile fails the UCP 2026-04-08 platform schema at ucp.{_errors(exc)}") from None
        fields = sorted({str(e["loc"][-1]) for e in errors})
        LENIENT_PROFILES.update(fields)
        _log.warning("platform_profile_lenient", extra={"profile": url, "missing": fields})
    profile_keys(document)


def validate_business_profile(document: Any) -> None:
    """Check a business profile against the UCP ``business_schema`` (ucp-sdk 0.5.0; what we serve).

    Raises: ProfileMalformed (used by tests and at render time, never on the hot path).
    """
    if not isinstance(document, dict) or not isinstance(document.get("ucp"), dict):
        raise ProfileMalformed("profile must be a JSON object with a ucp object")
    try:
        ucp_models.BusinessSchema.model_validate(document["ucp"])
    except pydantic.ValidationError as exc:
        raise ProfileMalformed(f"profile fails the UCP business schema at ucp.{_errors(exc)}") from None
    profile_keys(document)


def parse_platform_profile(url: str, body: bytes, *, etag: str | None = None) -> PlatformProfile:
    """Decode and validate a fetched platform profile.

    Args:
        url: the profile URL (kept on the value).
        body: the raw response bytes (already size-capped by the fetcher).
    Returns: :class:`PlatformProfile`.
    Raises: ProfileMalformed (not UTF-8 JSON, not an object, fails the schema beyond the entry
        fields :func:`_fetched_profile_ok` tolerates, bad keys).
    """
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise ProfileMalformed("profile is not JSON") from None
    _fetched_profile_ok(url, document)
    ucp = document["ucp"]
    caps = ucp.get("capabilities") or {}
    return PlatformProfile(
        url=url,
        document=document,
        version=str(ucp["version"]),
        capabilities={name: tuple(entries) for name, entries in caps.items()},
        keys=profile_keys(document),
        etag=etag,
        supported_versions=dict(ucp.get("supported_versions") or {}),
    )

"""Verification entry point for any transport (RFC 9421 §3.2 with UCP signatures.md policy).

``await verify_request(view, resolver, policy, now, replay_store)`` returns a
:class:`VerifiedSignature` or raises one of the typed errors in :mod:`.errors`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import http_sf

from .errors import (
    AlgorithmUnsupported,
    InvalidProfileUrl,
    KeyNotFound,
    SignatureInvalid,
    SignatureMissing,
)
from .jwkalg import _algorithm, algorithm_for_jwk
from .policy import MUTATING_METHODS, SignaturePolicy, check_freshness, required_components
from .replay import ReplayStore
from .resolver import KeyResolver
from .rfc9421 import ParsedSignature, RequestView, parse_signatures, verify_signature
from .rfc9530 import check_content_digest

__all__ = [
    "VerifiedSignature",
    "coverage_error",
    "frozen_constructor",
    "profile_url_of",
    "request_requirements",
    "select_signatures",
    "verify_request",
]


@dataclass(frozen=True, slots=True)
class VerifiedSignature:
    """A verified request signature. Only ``covered_components`` values are authenticated.

    Attributes:
        kid: the ``keyid`` (a ``kid`` in the caller's profile).
        profile_url: the caller's profile URL from ``UCP-Agent``.
        label: the (unsigned) label of the chosen signature.
        covered_components: serialized component identifiers, in signed order.
        created / expires: UNIX seconds or None. nonce / tag: strings or None.
        algorithm: RFC 9421 algorithm id, e.g. ``ecdsa-p256-sha256``.
        jwk: the public JWK that verified it.
    """

    kid: str
    profile_url: str
    label: str
    covered_components: tuple[str, ...]
    created: int | None
    expires: int | None
    nonce: str | None
    tag: str | None
    algorithm: str
    jwk: dict[str, Any]


def frozen_constructor(cls: type) -> Callable[..., Any]:
    """A constructor for the frozen slots dataclass ``cls`` (all fields, by position or name, no
    defaults) that sets each slot through its descriptor, as the generated ``__init__`` does
    through ``object.__setattr__`` at twice the cost (one result is built per verified request).
    Generated like dataclasses generates ``__init__``: field names are identifiers."""
    names = [f.name for f in dataclasses.fields(cls)]
    ns: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    ns.update({f"_set_{n}": cls.__dict__[n].__set__ for n in names})
    lines = "".join(f"    _set_{n}(obj, {n})\n" for n in names)
    exec(f"def make({', '.join(names)}):\n    obj = _new(_cls)\n{lines}    return obj\n", ns)  # noqa: S102 (identifiers only)
    return ns["make"]


_verified = frozen_constructor(VerifiedSignature)

# ``profile="<plain sf-string>"`` alone, the usual UCP-Agent; other shapes go through http_sf.
_PROFILE_ONLY = re.compile(r'profile="([\x20\x21\x23-\x5b\x5d-\x7e]*)"')


@lru_cache(maxsize=256)
def _profile_member(ucp_agent: str) -> Any:
    """The ``profile`` member's value parsed by http_sf (None if absent). A platform sends the same
    value on every call, so parses are kept (only successful ones: lru_cache does not keep raises)."""
    try:
        parsed = http_sf.parse(ucp_agent.encode("latin-1"), tltype="dictionary")
    except Exception as exc:
        raise InvalidProfileUrl("UCP-Agent is not a valid structured field") from exc
    member = parsed.get("profile")
    return member[0] if member else None


def profile_url_of(ucp_agent: str | None, *, allow_http: bool = False) -> str:
    """The ``profile`` member of a ``UCP-Agent`` Dictionary (RFC 8941). UCP overview §2.1.

    Raises InvalidProfileUrl (400) if missing, malformed or not https.
    """
    return _profile_url(ucp_agent, allow_http)


@lru_cache(maxsize=256)
def _profile_url(ucp_agent: str | None, allow_http: bool) -> str:
    """:func:`profile_url_of`, kept per header value: a platform sends the same ``UCP-Agent`` on
    every call (lru_cache keeps results only; a refused value is examined again each time)."""
    if not ucp_agent:
        raise InvalidProfileUrl("UCP-Agent header with a profile is required")
    m = _PROFILE_ONLY.fullmatch(ucp_agent.strip(" "))
    url = m.group(1) if m is not None else _profile_member(ucp_agent)
    if not isinstance(url, str):
        raise InvalidProfileUrl("UCP-Agent has no profile string")
    if not (url.startswith("https://") or (allow_http and url.startswith("http://"))):
        raise InvalidProfileUrl("profile URL must be https")
    return url


def request_requirements(view: RequestView) -> list[str]:
    """Required components for ``view`` (see :func:`.policy.required_components`)."""
    return [name for name, _ in _requirements(view)]


def _requirements(view: RequestView) -> tuple[tuple[str, str], ...]:
    """``(name, serialized identifier)`` pairs required for ``view``."""
    return _required_ids(*_request_shape(view))


def _request_shape(view: RequestView) -> tuple[bool, bool, bool, bool]:
    """What the required components depend on: mutating method, non-empty query, UCP-Agent, body."""
    url = view.url
    start = url.find("://") + 3 if "://" in url else 0  # the query is looked for after the scheme
    q = url.find("?", start)
    return (
        view.method.upper() in MUTATING_METHODS,
        0 <= q < len(url) - 1,  # a query that is not empty
        "ucp-agent" in view.headers,
        bool(view.body),
    )


@lru_cache(maxsize=256)
def _missing(shape: tuple[bool, bool, bool, bool], components: tuple[str, ...]) -> tuple[str, ...]:
    """Required names (for a request of ``shape``) that ``components`` does not cover, in order.
    Depends only on the shape flags and the identifiers, never on request values."""
    return tuple(name for name, cid in _required_ids(*shape) if cid not in components)


@lru_cache(maxsize=16)
def _required_ids(mutating: bool, has_query: bool, has_ucp_agent: bool, has_body: bool) -> tuple[tuple[str, str], ...]:
    names = required_components(
        "POST" if mutating else "GET", has_query=has_query, has_ucp_agent=has_ucp_agent, has_body=has_body
    )
    return tuple((n, f'"{n}"') for n in names)


async def select_signatures(
    sigs: list[ParsedSignature], profile_url: str, resolver: KeyResolver, policy: SignaturePolicy
) -> list[tuple[ParsedSignature, dict[str, Any]]]:
    """Signatures whose ``keyid`` the caller's profile lists, in received order (RFC 9421 §4.3).

    Unknown kids trigger one forced refresh (the resolver rate-limits it per origin). Raises
    KeyNotFound with a fixed message, whatever the reason (no oracle, RFC 9421 §8.3).
    """
    tag = policy.tag
    cands = [(s, kid) for s in sigs if (kid := s.keyid) and (tag is None or s.params.get("tag") == tag)]
    for force in (False, True):
        found = []
        for s, kid in cands:
            jwk = await resolver.resolve(profile_url, kid, force_refresh=force)
            if jwk is not None:
                found.append((s, jwk))
        if found:
            return found
    raise KeyNotFound("signature key not found in the caller's profile")


async def verify_request(
    view: RequestView,
    resolver: KeyResolver,
    policy: SignaturePolicy,
    now: dt.datetime,
    replay_store: ReplayStore | None = None,
) -> VerifiedSignature:
    """Verify the request signature of ``view``.

    Steps (RFC 9421 §3.2; UCP signatures.md "Key lookup"): parse the signature fields; take the
    caller's profile from ``UCP-Agent``; select the signature whose keyid the profile lists; pick
    the algorithm from the key (a differing ``alg`` -> 400 algorithm_unsupported); freshness;
    coverage gate; Content-Digest over the raw body (-> 400 digest_mismatch); ECDSA over the
    rebuilt base; then record ``(keyid, nonce)`` in the replay store.

    Raises: SignatureMissing, SignatureInvalid, KeyNotFound (401); DigestMismatch,
    AlgorithmUnsupported, InvalidProfileUrl (400).
    """
    headers = view.headers
    sig_input, sig = headers.getall("Signature-Input", None), headers.getall("Signature", None)
    if sig_input is None and sig is None:
        raise SignatureMissing("request is not signed")
    if sig_input is None or sig is None:  # a bare Signature is a pre-RFC draft (RFC 9421 App. A)
        raise SignatureInvalid("Signature and Signature-Input must both be present")
    # Several field lines combine into one Dictionary (RFC 9421 §4).
    sigs = parse_signatures(
        sig_input[0] if len(sig_input) == 1 else ", ".join(sig_input), sig[0] if len(sig) == 1 else ", ".join(sig)
    )
    profile_url = _profile_url(headers.get("UCP-Agent"), policy.allow_http_profiles)
    kid = sigs[0].keyid if len(sigs) == 1 and policy.tag is None else None
    if kid:  # one candidate: select_signatures without its lists (same lookups, same error)
        jwk = await resolver.resolve(profile_url, kid, force_refresh=False)
        if jwk is None:
            jwk = await resolver.resolve(profile_url, kid, force_refresh=True)
            if jwk is None:
                raise KeyNotFound("signature key not found in the caller's profile")
        result = _verify_one(view, sigs[0], jwk, profile_url, policy, now)
        if result.nonce is not None and replay_store is not None:
            await _remember(result, policy, now, replay_store)
        return result
    first_error: Exception | None = None
    # An attacker may add signatures naming the caller's kid; one that verifies is enough (§7.2.6).
    for chosen, jwk in await select_signatures(sigs, profile_url, resolver, policy):
        try:
            result = _verify_one(view, chosen, jwk, profile_url, policy, now)
        except (SignatureInvalid, AlgorithmUnsupported) as exc:
            first_error = first_error or exc
            continue
        if result.nonce is not None and replay_store is not None:
            await _remember(result, policy, now, replay_store)
        return result
    assert first_error is not None
    raise first_error


def coverage_error(missing: tuple[str, ...], headers: Any) -> SignatureInvalid:
    """The error for a signature that does not cover the required ``missing`` component names. A
    required field the request does not carry at all (a POST without ``Idempotency-Key``, a body
    without ``Content-Type``) cannot be covered: the message names the header to add."""
    absent = [n for n in missing if not n.startswith("@") and n not in headers]
    why = ""
    if absent:
        names = " and ".join("-".join(w.capitalize() for w in n.split("-")) for n in absent)
        noun, it = ("header", "it") if len(absent) == 1 else ("headers", "them")
        why = f" (the request has no {names} {noun}; UCP requires {it} here, covered by the signature)"
    return SignatureInvalid("signature does not cover required components: " + " ".join(missing) + why)


async def _remember(result: VerifiedSignature, policy: SignaturePolicy, now: dt.datetime, store: ReplayStore) -> None:
    """Record ``(keyid, nonce)`` of a signature with a nonce (RFC 9421 §7.2.2); raises
    SignatureInvalid for a replayed nonce."""
    if not await store.remember(result.kid, result.nonce, now=now, ttl=policy.replay_ttl):
        raise SignatureInvalid("signature nonce was already used")


def _verify_one(
    view: RequestView,
    chosen: ParsedSignature,
    jwk: dict[str, Any],
    profile_url: str,
    policy: SignaturePolicy,
    now: dt.datetime,
) -> VerifiedSignature:
    alg_cls, size = algorithm_for_jwk(jwk)
    alg_id = alg_cls.algorithm_id
    if alg_id == "ecdsa-p384-sha384" and not policy.allow_es384:
        raise AlgorithmUnsupported("ES384 is not accepted")
    p = chosen.params
    if "alg" in p and p["alg"] != alg_id:
        raise AlgorithmUnsupported("the alg parameter does not match the key")
    check_freshness(p, now, policy)
    missing = _missing(_request_shape(view), chosen.components)  # = missing_components()
    if missing:
        raise coverage_error(missing, view.headers)
    if view.body or "content-digest" in view.headers:
        check_content_digest(view.headers.get("Content-Digest"), view.body)
    kid = chosen.keyid or ""
    # Only the chosen signature is checked; others are never validated (RFC 9421 §7.2.6).
    # _algorithm = algorithm_instance(jwk) without looking the curve up a second time
    verify_signature(view, chosen, _algorithm(str(jwk["crv"]), jwk.get("x"), jwk.get("y"), size))
    nonce, tag = p.get("nonce"), p.get("tag")
    return _verified(  # positional, in field order: kid, profile_url, label, covered_components,
        kid,  # created, expires, nonce, tag, algorithm, jwk
        profile_url,
        chosen.label,
        chosen.components,
        p.get("created"),
        p.get("expires"),
        nonce if isinstance(nonce, str) else None,
        tag if isinstance(tag, str) else None,
        alg_id,
        jwk,
    )

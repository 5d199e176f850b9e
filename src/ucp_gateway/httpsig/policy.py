"""Verification policy: coverage gate and freshness (pure functions, clock passed in).

Coverage follows UCP 2026-04-08 signatures.md ("Request covered components"); freshness follows
RFC 9421 §2.3 / §3.2.1 with the gateway's own limits (UCP defines none).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from .errors import SignatureInvalid

__all__ = [
    "MUTATING_METHODS",
    "SignaturePolicy",
    "check_freshness",
    "check_times",
    "covered_names",
    "missing_components",
    "required_components",
]

MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True, slots=True)
class SignaturePolicy:
    """What a verifier demands. Times in seconds.

    Attributes:
        max_age: largest accepted age of ``created`` (RFC 9421 §3.2.1); default 300 s.
        future_skew: how far ``created`` may lie in the future; default 30 s.
        expiry_skew: grace for a past ``expires``; default 0 (expired means invalid).
        require_created / require_nonce: demand those parameters (UCP does not).
        tag: if set, only signatures with this ``tag`` are candidates (RFC 9421 §7.2.7).
        allow_es384: accept P-384 keys (UCP: optional).
        allow_http_profiles: accept ``http://`` profile URLs (dev and tests only).
    """

    max_age: int = 300
    future_skew: int = 30
    expiry_skew: int = 0
    require_created: bool = False
    require_nonce: bool = False
    tag: str | None = None
    allow_es384: bool = True
    allow_http_profiles: bool = False

    @property
    def replay_ttl(self) -> int:
        """Seconds a ``(keyid, nonce)`` must be remembered: max age + skew (RFC 9421 §7.2.2)."""
        return self.max_age + self.future_skew


def required_components(method: str, *, has_query: bool, has_ucp_agent: bool, has_body: bool) -> list[str]:
    """Components a request signature must cover (UCP signatures.md, "Request covered components").

    ``@method @authority @path`` always; ``@query`` when a query is present; ``ucp-agent`` when that
    header is present; ``idempotency-key`` on POST/PUT/PATCH/DELETE; ``content-digest`` and
    ``content-type`` when there is a body.
    """
    req = ["@method", "@authority", "@path"]
    if has_query:
        req.append("@query")
    if has_ucp_agent:
        req.append("ucp-agent")
    if method.upper() in MUTATING_METHODS:
        req.append("idempotency-key")
    if has_body:
        req += ["content-digest", "content-type"]
    return req


def covered_names(components: tuple[str, ...] | list[str]) -> set[str]:
    """Bare names of serialized component identifiers with no parameters (``"@path"`` -> ``@path``).

    A component with parameters (``;sf``, ``;key=``, ``;bs``) covers a transformed value, so it does
    not count towards the gate.
    """
    out = set()
    for c in components:
        if c.startswith('"') and c.endswith('"') and c.count('"') == 2:
            out.add(c[1:-1])
    return out


def missing_components(components: tuple[str, ...] | list[str], required: list[str]) -> list[str]:
    """Required names that the signature does not cover, in ``required`` order.

    Same answer as testing against :func:`covered_names`: a bare name ``n`` (no quote in it) is
    covered exactly when the serialized identifier ``"n"`` is among ``components``.
    """
    return [r for r in required if '"' in r or f'"{r}"' not in components]


def check_freshness(params: dict[str, Any], now: dt.datetime, policy: SignaturePolicy) -> None:
    """RFC 9421 §2.3, §3.2.1 with our limits. Raises SignatureInvalid.

    - ``expires`` before ``now - expiry_skew`` -> invalid;
    - ``created`` after ``now + future_skew`` -> invalid;
    - ``created`` older than ``max_age`` (+ ``future_skew`` tolerance) -> invalid;
    - a missing ``created``/``nonce`` -> invalid only if the policy requires it.
    """
    created, expires = params.get("created"), params.get("expires")
    if created is not None and type(created) is not int:
        raise SignatureInvalid("signature parameter created must be an integer")
    if expires is not None and type(expires) is not int:
        raise SignatureInvalid("signature parameter expires must be an integer")
    check_times(created, expires, isinstance(params.get("nonce"), str), policy, now.timestamp())


def check_times(created: int | None, expires: int | None, has_nonce: bool, policy: SignaturePolicy, ts: float) -> None:
    """The checks of :func:`check_freshness` once the parameters are read: ``created`` and ``expires``
    (integer UTC seconds or None), whether a string ``nonce`` is present, and ``ts`` (now, UTC
    seconds). Raises SignatureInvalid, in this order: expired, no created, created in the future,
    too old, no nonce (RFC 9421 §2.3, §3.2.1)."""
    if expires is not None and expires < ts - policy.expiry_skew:
        raise SignatureInvalid("signature has expired")
    if created is None:
        if policy.require_created:
            raise SignatureInvalid("signature has no created parameter")
    else:
        skew = policy.future_skew
        if created > ts + skew:
            raise SignatureInvalid("signature created in the future")
        if created + policy.max_age < ts - skew:
            raise SignatureInvalid("signature is too old")
    if policy.require_nonce and not has_nonce:
        raise SignatureInvalid("signature has no nonce")

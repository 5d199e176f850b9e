"""``private_key_jwt`` client authentication (RFC 7523 §2.2 and §3, OIDC Core §9), pure checks.

An OAuth client registered with a public JWK Set (``partners credentials add --kind oauth-client
--jwk FILE``) authenticates at the token and revocation endpoints with::

    client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer
    client_assertion=<a compact JWS signed with one of its keys>

The assertion is verified with joserfc. Its algorithm is fixed by the key (default deny): ES256 for
P-256, ES384 for P-384, EdDSA or Ed25519 (RFC 9864) for Ed25519 keys, the (kty, crv) pairs of
``httpsig.jwkalg.ALGORITHMS_BY_CURVE``; nothing else (no HMAC, no ``none``, no RSA). Claims
(RFC 7523 §3): ``iss`` = ``sub`` = the client id; ``aud`` names the issuer or the endpoint URL;
``exp`` is required and at most :data:`MAX_LIFETIME` seconds ahead; ``nbf``/``iat`` are honoured
with :data:`SKEW`; ``jti`` is required and single-use (the caller records it in the replay store
until ``exp``). Every failure is :class:`AssertionRefused` (the endpoint's ``invalid_client``).
No I/O here.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from joserfc import jwk, jws, jwt
from joserfc.errors import JoseError, SecurityWarning

from ..httpsig.errors import AlgorithmUnsupported, KeyMalformed
from ..httpsig.jwkalg import ALGORITHMS_BY_CURVE, public_key_from_jwk

__all__ = [
    "ASSERTION_TYPE",
    "JWS_ALGORITHMS",
    "MAX_LIFETIME",
    "SKEW",
    "AssertionRefused",
    "VerifiedAssertion",
    "check_jwks",
    "client_of",
    "verify_assertion",
]

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
#: seconds: the longest ``exp - now`` accepted (a client mints a fresh assertion per token request)
MAX_LIFETIME = 300
#: seconds of clock difference tolerated on ``exp``, ``nbf`` and ``iat``
SKEW = 30
_MAX_ASSERTION = 8192  # bytes of a compact JWS
_MAX_JTI = 200
_MAX_KEYS = 10
#: (kty, crv) -> the JWS algorithms of that key; only pairs the signature registry lists (default deny)
_ALGS_BY_KEY: dict[tuple[str, str], tuple[str, ...]] = {
    pair: algs
    for pair, algs in {
        ("EC", "P-256"): ("ES256",),
        ("EC", "P-384"): ("ES384",),
        ("OKP", "Ed25519"): ("EdDSA", "Ed25519"),
    }.items()
    if pair in ALGORITHMS_BY_CURVE
}
#: what RFC 8414 ``token_endpoint_auth_signing_alg_values_supported`` lists
JWS_ALGORITHMS: tuple[str, ...] = tuple(a for algs in _ALGS_BY_KEY.values() for a in algs)
_PUBLIC_MEMBERS = {"kty", "crv", "x", "y", "kid", "alg", "use", "key_ops"}


class AssertionRefused(Exception):
    """The client assertion does not authenticate the client (a short, secret-free reason)."""


@dataclass(frozen=True, slots=True)
class VerifiedAssertion:
    client_id: str
    jti: str
    exp: int  # UNIX seconds


def check_jwks(value: Any) -> dict[str, Any]:
    """A client's registered keys: a JWK Set ``{"keys": [...]}`` or one JWK, of public keys the
    registry verifies (``kty``/``crv`` of :data:`JWS_ALGORITHMS`, on-curve coordinates; ``alg``,
    ``use``, ``key_ops`` honoured), at most 10, with distinct ``kid``s (required when more than one).
    Returns the set with only the public members. Raises ValueError saying what is wrong (a private
    key is refused: the gateway never stores one)."""
    if isinstance(value, Mapping) and "keys" not in value and "kty" in value:
        value = {"keys": [value]}
    keys = value.get("keys") if isinstance(value, Mapping) else None
    if not isinstance(keys, list) or not keys:
        raise ValueError("expected a JWK or a JWK Set with keys")
    if len(keys) > _MAX_KEYS:
        raise ValueError(f"at most {_MAX_KEYS} keys")
    out = []
    for i, key in enumerate(keys):
        if not isinstance(key, Mapping):
            raise ValueError(f"key {i} is not a JSON object")
        if "d" in key or "p" in key or "k" in key:
            raise ValueError(f"key {i} holds private or symmetric key material: register the public key only")
        if (key.get("kty"), key.get("crv")) not in _ALGS_BY_KEY:
            raise ValueError(f"key {i}: unsupported key type (use EC P-256, EC P-384 or OKP Ed25519)")
        try:
            public_key_from_jwk(dict(key))
        except (AlgorithmUnsupported, KeyMalformed) as exc:
            raise ValueError(f"key {i}: {exc}") from None
        if "kid" in key and not (isinstance(key["kid"], str) and 1 <= len(key["kid"]) <= 200):
            raise ValueError(f"key {i}: kid must be a string of 1-200 characters")
        out.append({k: v for k, v in key.items() if k in _PUBLIC_MEMBERS})
    kids = [k.get("kid") for k in out]
    if len(out) > 1 and (None in kids or len(set(kids)) != len(kids)):
        raise ValueError("several keys need distinct kids")
    return {"keys": out}


def _parts(assertion: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and claims of a compact JWS, unverified. Raises AssertionRefused."""
    if not isinstance(assertion, str) or len(assertion) > _MAX_ASSERTION or assertion.count(".") != 2:
        raise AssertionRefused("client_assertion is not a compact JWT")
    try:
        obj = jws.extract_compact(assertion.encode("ascii"))
        claims = json.loads(obj.payload)
    except (JoseError, ValueError, UnicodeError):
        raise AssertionRefused("client_assertion is not a compact JWT") from None
    header = obj.headers()
    if not isinstance(claims, dict) or not isinstance(header, dict):
        raise AssertionRefused("client_assertion is not a JWT")
    return header, claims


def client_of(assertion: str) -> str:
    """The client the assertion says it is (its ``sub``, which must equal ``iss``), unverified: the
    key to look the client up by. Raises AssertionRefused."""
    _, claims = _parts(assertion)
    sub, iss = claims.get("sub"), claims.get("iss")
    if not isinstance(sub, str) or not sub or sub != iss:
        raise AssertionRefused("iss and sub must both be the client_id")
    return sub


def _key(header: Mapping[str, Any], jwks: Mapping[str, Any]) -> dict[str, Any]:
    keys = jwks.get("keys") or []
    kid = header.get("kid")
    if kid is None:
        if len(keys) != 1:
            raise AssertionRefused("the assertion names no kid and the client has several keys")
        return dict(keys[0])
    for key in keys:
        if key.get("kid") == kid:
            return dict(key)
    raise AssertionRefused("no registered key has the assertion's kid")


def verify_assertion(
    assertion: str, jwks: Mapping[str, Any], *, client_id: str, audiences: Collection[str], now: int
) -> VerifiedAssertion:
    """Verify ``assertion`` for ``client_id`` against its registered ``jwks`` at ``now`` (UNIX
    seconds); ``audiences``: the accepted ``aud`` values (the issuer, the endpoint URL). Returns
    the client id, ``jti`` and ``exp`` (the caller makes the jti single-use). Raises AssertionRefused."""
    header, claims = _parts(assertion)
    key_dict = _key(header, jwks)
    allowed = _ALGS_BY_KEY.get((key_dict.get("kty"), key_dict.get("crv")), ())
    alg = header.get("alg")
    if alg not in allowed:
        raise AssertionRefused("the assertion's alg is not the one of its key")
    if "alg" in key_dict and key_dict["alg"] != alg and not {alg, key_dict["alg"]} <= {"EdDSA", "Ed25519"}:
        raise AssertionRefused("the assertion's alg is not the key's alg")
    if header.get("crit"):
        raise AssertionRefused("unsupported critical header parameters")
    try:
        key = jwk.import_key(key_dict)
        with warnings.catch_warnings():  # EdDSA is still what most clients send (RFC 9864 deprecates it)
            warnings.simplefilter("ignore", SecurityWarning)
            jwt.decode(assertion, key, algorithms=[alg])
    except (JoseError, ValueError, TypeError):
        raise AssertionRefused("the assertion's signature does not verify") from None
    if claims.get("iss") != client_id or claims.get("sub") != client_id:
        raise AssertionRefused("iss and sub must both be the client_id")
    aud = claims.get("aud")
    auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if not any(isinstance(a, str) and a in audiences for a in auds):
        raise AssertionRefused("aud must name this authorization server (its issuer or token endpoint)")
    exp = claims.get("exp")
    if type(exp) is not int:
        raise AssertionRefused("exp (an integer NumericDate) is required")
    if exp <= now - SKEW:
        raise AssertionRefused("the assertion has expired")
    if exp > now + MAX_LIFETIME + SKEW:
        raise AssertionRefused(f"the assertion lives too long (exp at most {MAX_LIFETIME} s ahead)")
    for name in ("nbf", "iat"):
        value = claims.get(name)
        if value is not None and (type(value) not in (int, float) or value > now + SKEW):
            raise AssertionRefused(f"{name} is in the future or not a NumericDate")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not 1 <= len(jti) <= _MAX_JTI:
        raise AssertionRefused("jti (a string of 1-200 characters) is required")
    return VerifiedAssertion(client_id, jti, exp)

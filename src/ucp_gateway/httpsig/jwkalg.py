"""Public keys from JWKs and the verify of RFC 9421 §3.3.4/§3.3.5 (ECDSA) and §3.3.6 (Ed25519) signatures.

The algorithm is fixed by the key, never by the request (RFC 9421 §3.2 step 6, §7.3.6); keys and
the library's algorithm objects are cached by their coordinates. :data:`ALGORITHMS_BY_CURVE` is a
default-deny registry: the kty/crv/alg vocabulary of profiles is open (UCP 2026-08-25 SIG
"Signature Algorithms": an unknown key type never invalidates a key set), but a signature is
verified only with a (kty, crv) listed here; anything else is ``algorithm_unsupported`` for the
signature that needs it. Ed25519 (OKP, RFC 8037) is verified besides ES256/ES384. ``ecdsa_verify`` is the library's
ECDSA verify without its call layers, checked against it in tests/httpsig/test_verify_fast.py.
No I/O here.
"""

from __future__ import annotations

import base64
import binascii
from functools import lru_cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from http_message_signatures import HTTPMessageSignaturesException, algorithms

from .errors import AlgorithmUnsupported, KeyMalformed

__all__ = [
    "ALGORITHMS_BY_CURVE",
    "algorithm_for_jwk",
    "algorithm_instance",
    "der_signature",
    "ecdsa_verify",
    "key_verify",
    "looks_der_encoded",
    "public_key_from_jwk",
]

#: (kty, crv) -> (library algorithm class, coordinate size in bytes). ES256 is required by UCP,
#: ES384 and EdDSA/Ed25519 optional (UCP 2026-08-25 SIG "Signature Algorithms"). Nothing else is
#: ever accepted (default deny).
ALGORITHMS_BY_CURVE: dict[tuple[str, str], tuple[type, int]] = {
    ("EC", "P-256"): (algorithms.ECDSA_P256_SHA256, 32),
    ("EC", "P-384"): (algorithms.ECDSA_P384_SHA384, 48),
    ("OKP", "Ed25519"): (algorithms.ED25519, 32),
}
_CURVES = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1}


def _b64url_bytes(s: Any, size: int) -> bytes:
    if not isinstance(s, str):
        raise KeyMalformed("JWK coordinate must be a base64url string")
    try:
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (binascii.Error, ValueError):  # a bad length or a non-ASCII text: the caller's key, never a 500
        raise KeyMalformed("JWK coordinate is not base64url") from None
    if len(raw) != size:
        raise KeyMalformed("JWK coordinate has the wrong length")
    return raw


def _b64url(s: Any, size: int) -> int:
    return int.from_bytes(_b64url_bytes(s, size), "big")


# RFC 7518 §3.1 / RFC 8037 §3.1: the JWS alg of each curve (a key's alg member must be it)
_JOSE_ALG = {"P-256": "ES256", "P-384": "ES384", "Ed25519": "EdDSA"}


def algorithm_for_jwk(jwk: dict[str, Any]) -> tuple[type, int]:
    """The signature algorithm fixed by a public JWK's ``kty``/``crv``, as ``(library class,
    coordinate size in bytes)``.

    The key's own restrictions are honoured (fail closed): an ``alg`` member must be the curve's
    JWS algorithm (RFC 7517 §4.4, RFC 7518 §3.1), ``use`` must be ``sig`` (§4.2), and ``key_ops``
    must allow ``verify`` (§4.3). Raises AlgorithmUnsupported otherwise.
    """
    alg = ALGORITHMS_BY_CURVE.get((str(jwk.get("kty")), str(jwk.get("crv"))))
    if alg is None:
        raise AlgorithmUnsupported("the signing key's algorithm is not supported (use ES256, ES384 or EdDSA)")
    if "alg" in jwk and jwk["alg"] != _JOSE_ALG[jwk["crv"]]:
        raise AlgorithmUnsupported("the signing key's alg does not match its curve")
    if "use" in jwk and jwk["use"] != "sig":
        raise AlgorithmUnsupported("the signing key is not for signatures (use)")
    if "key_ops" in jwk and not (isinstance(jwk["key_ops"], list) and "verify" in jwk["key_ops"]):
        raise AlgorithmUnsupported("the signing key does not allow verify (key_ops)")
    return alg


def _coordinates(crv: str, x: Any, y: Any) -> None:
    """Refuse coordinates that are not strings before they reach a cache key (a list or an object
    in a caller's profile is unhashable: a TypeError there would be a 500). An OKP key has no
    ``y`` (RFC 8037 §2): it is ignored there."""
    if type(x) is not str or (crv in _CURVES and type(y) is not str):
        raise KeyMalformed("JWK coordinate must be a base64url string")


def _public_key(crv: str, x: Any, y: Any, size: int) -> Any:
    _coordinates(crv, x, y)
    if crv == "Ed25519":
        return _ed25519_cached(x)
    return _public_key_cached(crv, x, y, size)


@lru_cache(maxsize=4096)
def _ed25519_cached(x: str) -> ed25519.Ed25519PublicKey:
    # RFC 8037 §2: x is the 32-byte public key; every 32-byte string decodes (no point check here:
    # a non-canonical key simply verifies nothing)
    try:
        return ed25519.Ed25519PublicKey.from_public_bytes(_b64url_bytes(x, 32))
    except ValueError as exc:
        raise KeyMalformed("JWK is not a valid Ed25519 public key") from exc


@lru_cache(maxsize=4096)
def _public_key_cached(crv: str, x: str, y: str, size: int) -> ec.EllipticCurvePublicKey:
    nums = ec.EllipticCurvePublicNumbers(_b64url(x, size), _b64url(y, size), _CURVES[crv]())
    try:
        return nums.public_key()  # checks the point is on the curve
    except ValueError as exc:
        raise KeyMalformed("JWK is not a valid point on its curve") from exc


def public_key_from_jwk(jwk: dict[str, Any]) -> Any:
    """A cryptography public key from an EC JWK (RFC 7518 §6.2) or an OKP Ed25519 JWK (RFC 8037
    §2), cached by its coordinates.

    Raises AlgorithmUnsupported for another kty/crv, KeyMalformed (422 profile_malformed) for
    coordinates that are not base64url of the curve's size or an off-curve point.
    """
    _alg, size = algorithm_for_jwk(jwk)
    return _public_key(str(jwk["crv"]), jwk.get("x"), jwk.get("y"), size)


def _algorithm(crv: str, x: Any, y: Any, size: int) -> Any:
    """The library algorithm bound to the key (cached by coordinates). Raises AlgorithmUnsupported."""
    _coordinates(crv, x, y)
    if crv == "Ed25519":
        return _ed25519_algorithm(x)
    return _algorithm_cached(crv, x, y, size)


@lru_cache(maxsize=4096)
def _algorithm_cached(crv: str, x: str, y: str, size: int) -> Any:
    alg_cls, _ = ALGORITHMS_BY_CURVE[("EC", crv)]
    return alg_cls(public_key=_public_key_cached(crv, x, y, size))


@lru_cache(maxsize=4096)
def _ed25519_algorithm(x: str) -> Any:
    return algorithms.ED25519(public_key=_ed25519_cached(x))


def algorithm_instance(jwk: dict[str, Any]) -> Any:
    """The library algorithm for ``jwk``'s curve bound to its public key (cached by coordinates).
    Raises AlgorithmUnsupported like :func:`public_key_from_jwk`."""
    _alg, size = algorithm_for_jwk(jwk)
    return _algorithm(str(jwk["crv"]), jwk.get("x"), jwk.get("y"), size)


def looks_der_encoded(sig: bytes) -> bool:
    """True if ``sig`` parses as an ASN.1 DER ECDSA signature (pitfall 1: DER instead of r||s)."""
    if len(sig) < 8 or sig[0] != 0x30 or sig[1] != len(sig) - 2:
        return False
    try:
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        decode_dss_signature(sig)
        return True
    except ValueError:
        return False


_ECDSA_CLASSES = frozenset(cls for (kty, _crv), (cls, _size) in ALGORITHMS_BY_CURVE.items() if kty == "EC")


def der_signature(signature: bytes, size: int) -> bytes:
    """``r || s`` (each ``size`` bytes, big-endian) as the DER ``Ecdsa-Sig-Value`` cryptography
    verifies: ``encode_dss_signature(int(r), int(s))`` built from the bytes directly (minimal
    positive INTEGERs: leading zeros dropped, one 0x00 before a set high bit; short-form lengths
    while ``size`` <= 61). tests/httpsig/test_verify_fast.py checks it equals the library call."""
    if size > 61:  # a long-form length could be needed: the library encodes it
        return encode_dss_signature(int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big"))
    r, s = signature[:size].lstrip(b"\0"), signature[size:].lstrip(b"\0")
    if not r or r[0] > 0x7F:
        r = b"\0" + r
    if not s or s[0] > 0x7F:
        s = b"\0" + s
    return bytes((0x30, len(r) + len(s) + 4, 0x02, len(r))) + r + bytes((0x02, len(s))) + s


def ecdsa_verify(algorithm: Any, signature: bytes, message: bytes) -> None:
    """What ``algorithm.verify(signature=, message=)`` of the library's ECDSA classes does
    (``r || s``, each ``_coordinate_size`` bytes, to DER, then cryptography's verify), called
    directly: the library's method is the reference (tests/httpsig/test_verify_fast.py).

    Raises HTTPMessageSignaturesException (wrong length) or InvalidSignature.
    """
    size = algorithm._coordinate_size
    if len(signature) != 2 * size:
        raise HTTPMessageSignaturesException("Unexpected signature length")
    algorithm.public_key.verify(der_signature(signature, size), message, algorithm.signature_algorithm)


def key_verify(algorithm: Any, signature: bytes, message: bytes) -> None:
    """Verify ``signature`` over ``message`` with a library algorithm from :func:`algorithm_instance`:
    ECDSA through :func:`ecdsa_verify` (raw ``r || s``, never DER), Ed25519 as RFC 8032 (the 64-byte
    signature; RFC 9421 §3.3.6). Raises HTTPMessageSignaturesException or InvalidSignature."""
    if type(algorithm) in _ECDSA_CLASSES:
        ecdsa_verify(algorithm, signature, message)
        return
    if type(algorithm) is algorithms.ED25519 and len(signature) != 64:  # RFC 8032 §5.1.6: exactly 64 bytes
        raise HTTPMessageSignaturesException("Unexpected signature length")
    algorithm.verify(signature=signature, message=message)  # the library's (RFC 9421 vectors: RSA, HMAC too)

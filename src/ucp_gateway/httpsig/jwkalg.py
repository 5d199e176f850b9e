"""EC public keys from JWKs and the ECDSA verify of RFC 9421 §3.3.4/§3.3.5 signatures.

The algorithm is fixed by the key, never by the request (RFC 9421 §3.2 step 6, §7.3.6); keys and
the library's algorithm objects are cached by their coordinates. ``ecdsa_verify`` is the library's
ECDSA verify without its call layers, checked against it in tests/httpsig/test_verify_fast.py.
No I/O here.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from http_message_signatures import HTTPMessageSignaturesException, algorithms

from .errors import AlgorithmUnsupported

__all__ = [
    "ALGORITHMS_BY_CURVE",
    "algorithm_for_jwk",
    "algorithm_instance",
    "der_signature",
    "ecdsa_verify",
    "looks_der_encoded",
    "public_key_from_jwk",
]

#: (kty, crv) -> (library algorithm class, coordinate size in bytes). ES256 is required by UCP,
#: ES384 optional (UCP signatures.md "Algorithms"). Nothing else is ever accepted.
ALGORITHMS_BY_CURVE: dict[tuple[str, str], tuple[type, int]] = {
    ("EC", "P-256"): (algorithms.ECDSA_P256_SHA256, 32),
    ("EC", "P-384"): (algorithms.ECDSA_P384_SHA384, 48),
}
_CURVES = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1}


def _b64url(s: Any, size: int) -> int:
    if not isinstance(s, str):
        raise AlgorithmUnsupported("JWK coordinate must be a base64url string")
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != size:
        raise AlgorithmUnsupported("JWK coordinate has the wrong length")
    return int.from_bytes(raw, "big")


def algorithm_for_jwk(jwk: dict[str, Any]) -> tuple[type, int]:
    """The signature algorithm fixed by a public JWK's ``kty``/``crv``. Raises AlgorithmUnsupported."""
    alg = ALGORITHMS_BY_CURVE.get((str(jwk.get("kty")), str(jwk.get("crv"))))
    if alg is None:
        raise AlgorithmUnsupported("the signing key's algorithm is not supported (use ES256)")
    return alg


@lru_cache(maxsize=4096)
def _public_key(crv: str, x: str, y: str, size: int) -> ec.EllipticCurvePublicKey:
    nums = ec.EllipticCurvePublicNumbers(_b64url(x, size), _b64url(y, size), _CURVES[crv]())
    try:
        return nums.public_key()  # checks the point is on the curve
    except ValueError as exc:
        raise AlgorithmUnsupported("JWK is not a valid point on its curve") from exc


def public_key_from_jwk(jwk: dict[str, Any]) -> ec.EllipticCurvePublicKey:
    """A cryptography public key from an EC JWK (RFC 7518 §6.2), cached by its coordinates.

    Raises AlgorithmUnsupported for another kty/crv, wrong coordinate sizes or an off-curve point.
    """
    _alg, size = algorithm_for_jwk(jwk)
    return _public_key(str(jwk["crv"]), jwk.get("x"), jwk.get("y"), size)


@lru_cache(maxsize=4096)
def _algorithm(crv: str, x: str, y: str, size: int) -> Any:
    alg_cls, _ = ALGORITHMS_BY_CURVE[("EC", crv)]
    return alg_cls(public_key=_public_key(crv, x, y, size))


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


_ECDSA_CLASSES = frozenset(cls for cls, _size in ALGORITHMS_BY_CURVE.values())


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

"""EC P-256 JWKs for company signing keys; ``kid`` = RFC 7638 thumbprint.

Public JWKs we publish carry exactly 32-byte coordinates (RFC 7518 §6.2.1.2: the full field size,
left-padded), ``use: sig``, ``alg: ES256`` and ``kid`` (UCP signatures.md, "Keys").
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from joserfc.jwk import ECKey, OKPKey

__all__ = ["generate_p256", "private_key_from_jwk", "public_jwk", "thumbprint"]

_SIZE = 32


def _b64(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(_SIZE, "big")).rstrip(b"=").decode("ascii")


def _int(s: str) -> int:
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != _SIZE:
        raise ValueError("coordinate is not 32 bytes")
    return int.from_bytes(raw, "big")


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 §3 thumbprint (SHA-256, base64url) of an EC JWK (``crv kty x y``: the ``kid`` we
    use) or an OKP JWK (``crv kty x``, RFC 8037 §2; UCP 2026-08-25 SIG "Key Format": the ``kid`` of a
    Web Bot Auth key). Raises KeyError / ValueError for another kty or missing members."""
    if jwk.get("kty") == "OKP":
        return OKPKey.import_key({k: jwk[k] for k in ("crv", "kty", "x")}).thumbprint()
    members = {k: jwk[k] for k in ("crv", "kty", "x", "y")}
    return ECKey.import_key(members).thumbprint()


def generate_p256() -> tuple[dict[str, Any], str]:
    """A fresh P-256 private JWK (``kty crv x y d``, 32-byte members) and its kid."""
    key = ec.generate_private_key(ec.SECP256R1())
    nums = key.private_numbers()
    jwk = {
        "kty": "EC",
        "crv": "P-256",
        "x": _b64(nums.public_numbers.x),
        "y": _b64(nums.public_numbers.y),
        "d": _b64(nums.private_value),
    }
    return jwk, thumbprint(jwk)


def public_jwk(jwk: dict[str, Any], kid: str) -> dict[str, Any]:
    """The publishable form: ``kty crv x y`` plus ``kid``, ``use: sig``, ``alg: ES256``. No ``d``."""
    return {
        "kty": "EC",
        "crv": "P-256",
        "x": jwk["x"],
        "y": jwk["y"],
        "kid": kid,
        "use": "sig",
        "alg": "ES256",
    }


def private_key_from_jwk(jwk: dict[str, Any]) -> ec.EllipticCurvePrivateKey:
    """The cryptography private key of a private EC P-256 JWK.

    Raises ValueError unless ``d`` yields exactly the public point ``(x, y)`` and sizes are right.
    """
    if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
        raise ValueError("not an EC P-256 key")
    x, y, d = _int(jwk["x"]), _int(jwk["y"]), _int(jwk["d"])
    key = ec.derive_private_key(d, ec.SECP256R1())
    pub = key.public_key().public_numbers()
    if (pub.x, pub.y) != (x, y):
        raise ValueError("private scalar does not match the public point")
    return key

"""An independent RFC 9421 signer/verifier for tests: plain ``cryptography`` and a base built by
hand from RFC 9421 §2.5 (no http-message-signatures code), to check interoperability both ways."""

from __future__ import annotations

import base64
import hashlib

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

PROFILE = "https://platform.example/profile.json"


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def b64url_int(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()


def new_key(kid: str = "platform-2026") -> tuple[ec.EllipticCurvePrivateKey, dict]:
    priv = ec.generate_private_key(ec.SECP256R1())
    n = priv.public_key().public_numbers()
    return priv, {"kty": "EC", "crv": "P-256", "x": b64url_int(n.x), "y": b64url_int(n.y), "kid": kid}


def digest(body: bytes) -> str:
    return f"sha-256=:{b64(hashlib.sha256(body).digest())}:"


def raw_sign(priv, base: bytes) -> bytes:
    if isinstance(priv, ed25519.Ed25519PrivateKey):  # RFC 9421 §3.3.6: the RFC 8032 signature as is
        return priv.sign(base)
    r, s = decode_dss_signature(priv.sign(base, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def raw_verify(jwk: dict, base: bytes, sig: bytes) -> None:
    """Raises InvalidSignature unless ``sig`` (64-byte r||s) verifies ``base`` under ``jwk``."""
    assert len(sig) == 64
    x = int.from_bytes(base64.urlsafe_b64decode(jwk["x"] + "=="), "big")
    y = int.from_bytes(base64.urlsafe_b64decode(jwk["y"] + "=="), "big")
    pub = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
    pub.verify(der, base, ec.ECDSA(hashes.SHA256()))


def build_base(lines: list[tuple[str, str]], params: str) -> bytes:
    """RFC 9421 §2.5: one ``"id": value`` line per component, then ``"@signature-params": ...``."""
    out = "".join(f"{ident}: {value}\n" for ident, value in lines)
    return (out + f'"@signature-params": {params}').encode("ascii")


def sign_request(
    priv,
    *,
    kid: str = "platform-2026",
    method: str = "POST",
    authority: str = "shop.example",
    path: str = "/checkout-sessions",
    query: str | None = None,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    components: list[str] | None = None,
    created: int | None = 1_775_649_600,
    extra_params: str = "",
    label: str = "sig1",
    profile: str = PROFILE,
    idempotency_key: str | None = "idem-1",
) -> list[tuple[str, str]]:
    """Header lines (name, value) of a UCP-style signed request, base built by hand.

    ``components`` default to the UCP-required set for the request. Field values are taken from
    ``headers`` (all lines of a name joined with ", ").
    """
    hdrs = list(headers or [])
    if profile is not None and not any(n.lower() == "ucp-agent" for n, _ in hdrs):
        hdrs.append(("UCP-Agent", f'profile="{profile}"'))
    if idempotency_key and method in ("POST", "PUT", "PATCH", "DELETE"):
        hdrs.append(("Idempotency-Key", idempotency_key))
    if body:
        if not any(n.lower() == "content-type" for n, _ in hdrs):
            hdrs.append(("Content-Type", "application/json"))
        hdrs.append(("Content-Digest", digest(body)))
    if components is None:
        components = ["@method", "@authority", "@path"]
        if query:
            components.append("@query")
        names = {n.lower() for n, _ in hdrs}
        for f in ("ucp-agent", "idempotency-key", "content-digest", "content-type"):
            if f in names:
                components.append(f)
    derived = {"@method": method, "@authority": authority.lower(), "@path": path, "@query": f"?{query or ''}"}
    lines = []
    for c in components:
        if c in derived:
            lines.append((f'"{c}"', derived[c]))
        else:
            vals = [v.strip() for n, v in hdrs if n.lower() == c]
            lines.append((f'"{c}"', ", ".join(vals)))
    params = "(" + " ".join(f'"{c}"' for c in components) + ")"
    if created is not None:
        params += f";created={created}"
    params += f';keyid="{kid}"' + extra_params
    sig = raw_sign(priv, build_base(lines, params))
    hdrs.append(("Signature-Input", f"{label}={params}"))
    hdrs.append(("Signature", f"{label}=:{b64(sig)}:"))
    return hdrs

"""Test-side RFC 9421 signing/verification with the RFC's published P-256 test key (B.1.3).

Stands in for the company key until the signatures package signs webhooks; uses the same library.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from http_message_signatures import (
    HTTPMessageSigner,
    HTTPMessageVerifier,
    HTTPSignatureKeyResolver,
    algorithms,
)
from multidict import CIMultiDict as CaseInsensitiveDict

KEYS = Path(__file__).resolve().parents[1] / "data" / "rfc9421" / "keys"
KID = "test-key-ecc-p256"
_PRIV = serialization.load_pem_private_key((KEYS / "test-key-ecc-p256.priv.pkcs8.pem").read_bytes(), None)
_PUB = _PRIV.public_key()
COMPONENTS = (
    "@method",
    "@authority",
    "@path",
    "content-digest",
    "content-type",
    "ucp-agent",
    "webhook-id",
    "webhook-timestamp",
)


class _Keys(HTTPSignatureKeyResolver):
    def resolve_private_key(self, key_id):
        return _PRIV

    def resolve_public_key(self, key_id):
        return _PUB


class Msg:
    def __init__(self, method, url, headers, body=b""):
        self.method, self.url, self.headers, self.body = method, url, CaseInsensitiveDict(headers), body


def digest(body: bytes) -> str:
    return "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"


async def sign_webhook(pool, company_id, *, url, body, ucp_agent, webhook_id, webhook_timestamp, now):
    m = Msg(
        "POST",
        url,
        {
            "Content-Type": "application/json",
            "Content-Digest": digest(body),
            "UCP-Agent": ucp_agent,
            "Webhook-Id": webhook_id,
            "Webhook-Timestamp": webhook_timestamp,
        },
        body,
    )
    HTTPMessageSigner(signature_algorithm=algorithms.ECDSA_P256_SHA256, key_resolver=_Keys()).sign(
        m,
        key_id=KID,
        label="sig1",
        include_alg=False,
        covered_component_ids=COMPONENTS,
        body=body,
        use_existing_digest=True,
    )
    return dict(m.headers)


def verify(method: str, url: str, headers, body: bytes) -> None:
    """Raise unless the message carries a valid sig1 over COMPONENTS and a matching Content-Digest."""
    assert headers["Content-Digest"] == digest(body)
    HTTPMessageVerifier(signature_algorithm=algorithms.ECDSA_P256_SHA256, key_resolver=_Keys()).verify(
        Msg(method, url, dict(headers), body), require_components=COMPONENTS, max_age=None, body=body
    )


# --- a buyer agent's own key and a verifier for any published JWK --------------------------------
def _b64u(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()


def jwk_public_key(jwk: dict):
    from cryptography.hazmat.primitives.asymmetric import ec

    x = int.from_bytes(base64.urlsafe_b64decode(jwk["x"] + "=="), "big")
    y = int.from_bytes(base64.urlsafe_b64decode(jwk["y"] + "=="), "big")
    return ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()


class _One(HTTPSignatureKeyResolver):
    def __init__(self, priv=None, pub=None):
        self.priv, self.pub = priv, pub

    def resolve_private_key(self, key_id):
        return self.priv

    def resolve_public_key(self, key_id):
        return self.pub


class BuyerKey:
    """A test buyer agent's key (EC P-256, or OKP Ed25519 with ``curve="Ed25519"``, whose kid is
    its RFC 7638 thumbprint as UCP 2026-08-25 asks); signs requests with http-message-signatures."""

    def __init__(self, kid: str = "buyer-2026", curve: str = "P-256"):
        if curve == "Ed25519":
            from cryptography.hazmat.primitives.asymmetric import ed25519

            from ucp_gateway.keys.rfc7638 import thumbprint

            self.priv = ed25519.Ed25519PrivateKey.generate()
            raw = self.priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
            self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": x, "use": "sig", "alg": "EdDSA"}
            self.kid = self.jwk["kid"] = thumbprint(self.jwk)
            self.algorithm = algorithms.ED25519
            return
        from cryptography.hazmat.primitives.asymmetric import ec

        self.kid = kid
        self.priv = ec.generate_private_key(ec.SECP256R1())
        n = self.priv.public_key().public_numbers()
        self.jwk = {
            "kty": "EC",
            "crv": "P-256",
            "x": _b64u(n.x),
            "y": _b64u(n.y),
            "kid": kid,
            "use": "sig",
            "alg": "ES256",
        }
        self.algorithm = algorithms.ECDSA_P256_SHA256

    def sign(self, method: str, url: str, headers: dict, body: bytes = b"") -> dict:
        """Headers + Content-Digest + Signature(-Input) covering the UCP request components."""
        h = dict(headers)
        comps = ["@method", "@authority", "@path"]
        if body:
            h["Content-Digest"] = digest(body)
            comps.append("content-digest")
        comps += [n for n in ("content-type", "ucp-agent", "idempotency-key") if any(k.lower() == n for k in h)]
        m = Msg(method, url, h, body)
        HTTPMessageSigner(signature_algorithm=self.algorithm, key_resolver=_One(self.priv)).sign(
            m,
            key_id=self.kid,
            label="sig1",
            include_alg=False,
            covered_component_ids=comps,
            body=body or None,
            use_existing_digest=bool(body),
        )
        return dict(m.headers)


class RespMsg:
    """A response for the verifier; ``request`` (a Msg) resolves the ``;req`` components."""

    def __init__(self, status, headers, body, request=None):
        self.status_code, self.headers, self.body = status, CaseInsensitiveDict(headers), body
        self.request = request


def verify_with_jwk(message, jwk: dict, require: tuple[str, ...]) -> None:
    """Verify ``message`` (Msg or RespMsg) against a published public JWK; raises on failure."""
    assert message.headers["Content-Digest"] == digest(message.body)
    HTTPMessageVerifier(
        signature_algorithm=algorithms.ECDSA_P256_SHA256, key_resolver=_One(pub=jwk_public_key(jwk))
    ).verify(message, require_components=require, max_age=None, body=message.body)

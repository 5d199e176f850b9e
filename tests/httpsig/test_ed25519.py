"""EdDSA / Ed25519 (OKP JWKs, RFC 8037) verified besides P-256, by both routes (the reference
verify_request and the fused one), and the default-deny registry of key algorithms: an open
kty/crv/alg vocabulary in profiles, but only registered algorithms ever verify (UCP 2026-08-25 SIG
"Signature Algorithms")."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from ucp_gateway.discovery.profiles import profile_keys
from ucp_gateway.httpsig import StaticKeyResolver, verify_request
from ucp_gateway.httpsig.errors import AlgorithmUnsupported, KeyMalformed
from ucp_gateway.httpsig.jwkalg import ALGORITHMS_BY_CURVE, algorithm_for_jwk, algorithm_instance, key_verify
from ucp_gateway.keys.rfc7638 import thumbprint

from .signer import PROFILE, sign_request
from .test_fused import assert_same
from .test_verify import BODY, NOW, POLICY, view

# RFC 8037 Appendix A.1 / A.3: the Ed25519 test key and its RFC 7638 thumbprint
RFC8037_X = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
RFC8037_D = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"
RFC8037_THUMBPRINT = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def _b64u(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def new_ed25519() -> tuple[ed25519.Ed25519PrivateKey, dict]:
    priv = ed25519.Ed25519PrivateKey.generate()
    raw = priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": _b64u(raw), "use": "sig", "alg": "EdDSA"}
    jwk["kid"] = thumbprint(jwk)
    return priv, jwk


def test_thumbprint_kid_of_the_rfc8037_key():
    assert thumbprint({"kty": "OKP", "crv": "Ed25519", "x": RFC8037_X}) == RFC8037_THUMBPRINT
    # the RFC's signature of "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc" (A.4) verifies
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": RFC8037_X, "kid": RFC8037_THUMBPRINT}
    sig = base64.urlsafe_b64decode(
        "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg=="
    )
    key_verify(algorithm_instance(jwk), sig, b"eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc")


async def test_ed25519_request_verifies_on_both_routes():
    priv, jwk = new_ed25519()
    headers = sign_request(priv, kid=jwk["kid"], body=BODY)
    ref = await assert_same(headers, keys=[jwk])
    assert ref[0] == "ok" and ref[1].kid == jwk["kid"] and ref[1].algorithm == "ed25519"


async def test_ed25519_tampered_body_or_signature_fails_alike():
    priv, jwk = new_ed25519()
    headers = sign_request(priv, kid=jwk["kid"], body=BODY)
    ref = await assert_same(headers, keys=[jwk], body=BODY + b" ")
    assert ref[0] != "ok"
    other, _ = new_ed25519()  # signed by another key under this kid
    ref = await assert_same(sign_request(other, kid=jwk["kid"], body=BODY), keys=[jwk])
    assert ref[0] == "signature_invalid"


@pytest.mark.parametrize(
    "change",
    [
        {"alg": "ES256"},  # the alg member must be the curve's (RFC 8037 §3.1: EdDSA)
        {"use": "enc"},
        {"key_ops": ["sign"]},
    ],
)
async def test_ed25519_key_restrictions_are_honoured(change):
    priv, jwk = new_ed25519()
    headers = sign_request(priv, kid=jwk["kid"], body=BODY)
    resolver = StaticKeyResolver({PROFILE: [{**jwk, **change}]})
    with pytest.raises(AlgorithmUnsupported):
        await verify_request(view(headers), resolver, POLICY, NOW, None)


@pytest.mark.parametrize("x", [_b64u(b"\x01" * 31), 12, ["a"], "not base64url!"])
async def test_ed25519_malformed_key_is_profile_malformed(x):
    priv, jwk = new_ed25519()
    headers = sign_request(priv, kid=jwk["kid"], body=BODY)
    resolver = StaticKeyResolver({PROFILE: [{**jwk, "x": x}]})
    with pytest.raises(KeyMalformed):
        await verify_request(view(headers), resolver, POLICY, NOW, None)


@pytest.mark.parametrize(
    "jwk",
    [
        {"kty": "OKP", "crv": "Ed448", "x": "AA"},
        {"kty": "OKP", "crv": "X25519", "x": "AA"},
        {"kty": "RSA", "n": "AQAB", "e": "AQAB"},
        {"kty": "EC", "crv": "secp256k1", "x": "AA", "y": "AA"},
        {"kty": "ML-DSA", "alg": "ML-DSA-65", "pub": "AA"},
    ],
)
def test_unknown_key_types_are_listed_but_never_verify(jwk):
    jwk = {**jwk, "kid": "k"}
    assert profile_keys({"keys": [jwk]}) == (jwk,)  # open vocabulary: the key set stays valid
    with pytest.raises(AlgorithmUnsupported):
        algorithm_for_jwk(jwk)  # default deny: only the registry verifies
    assert set(ALGORITHMS_BY_CURVE) == {("EC", "P-256"), ("EC", "P-384"), ("OKP", "Ed25519")}


def test_ed25519_signature_length_is_exact():
    _, jwk = new_ed25519()
    with pytest.raises(Exception) as err:
        key_verify(algorithm_instance(jwk), b"\0" * 63, b"m")
    assert "length" in str(err.value)

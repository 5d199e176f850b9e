"""AES-256-GCM envelope for private JWKs: round trip, AAD binding, KEK ring, rewrap (pure)."""

from __future__ import annotations

import base64
import os
import stat
import uuid

import pytest

from ucp_gateway.errors import ConfigError
from ucp_gateway.keys.envelope import (
    KekRing,
    KeyDecryptError,
    decrypt_private_jwk,
    encrypt_private_jwk,
    rewrap,
)
from ucp_gateway.keys.rfc7638 import generate_p256, public_jwk

A, B = uuid.uuid4(), uuid.uuid4()


@pytest.fixture
def ring():
    return KekRing.parse(KekRing.new_entry("k1") + "," + KekRing.new_entry("k2"))


def test_round_trip_and_format(ring):
    jwk, kid = generate_p256()
    blob = encrypt_private_jwk(ring, A, kid, jwk)
    assert blob["v"] == 1 and blob["kek_id"] == "k2" and len(base64.b64decode(blob["nonce"])) == 12
    assert jwk["d"] not in str(blob)
    assert decrypt_private_jwk(ring, A, kid, blob) == jwk
    assert encrypt_private_jwk(ring, A, kid, jwk)["nonce"] != blob["nonce"]  # fresh nonce per record


def test_published_jwk_has_32_byte_coordinates():
    for _ in range(20):
        jwk, kid = generate_p256()
        pub = public_jwk(jwk, kid)
        assert set(pub) == {"kty", "crv", "x", "y", "kid", "use", "alg"}
        assert pub["use"] == "sig" and pub["alg"] == "ES256" and "d" not in pub
        for c in ("x", "y"):
            assert len(base64.urlsafe_b64decode(pub[c] + "=")) == 32


@pytest.mark.parametrize("what", ["company", "kid", "kek_label", "ciphertext", "nonce", "version"])
def test_tampering_fails_closed(ring, what):
    jwk, kid = generate_p256()
    _other_jwk, other_kid = generate_p256()
    blob = encrypt_private_jwk(ring, A, kid, jwk)
    company, k = A, kid
    if what == "company":
        company = B  # row moved to another company
    elif what == "kid":
        k = other_kid
    elif what == "kek_label":
        blob["kek_id"] = "k1"
    elif what == "ciphertext":
        ct = bytearray(base64.b64decode(blob["ct"]))
        ct[0] ^= 1
        blob["ct"] = base64.b64encode(bytes(ct)).decode()
    elif what == "nonce":
        blob["nonce"] = base64.b64encode(os.urandom(12)).decode()
    else:
        blob["v"] = 2
    with pytest.raises(KeyDecryptError):
        decrypt_private_jwk(ring, company, k, blob)


def test_wrong_kek_fails(ring):
    jwk, kid = generate_p256()
    blob = encrypt_private_jwk(ring, A, kid, jwk)
    impostor = KekRing.parse(KekRing.new_entry("k2"))  # same id, different bytes
    with pytest.raises(KeyDecryptError, match="decryption failed"):
        decrypt_private_jwk(impostor, A, kid, blob)
    missing = KekRing.parse(KekRing.new_entry("k9"))
    with pytest.raises(KeyDecryptError, match="not in the ring"):
        decrypt_private_jwk(missing, A, kid, blob)


def test_thumbprint_rechecked_after_decrypt(ring):
    _jwk, kid = generate_p256()
    other, _ = generate_p256()
    blob = encrypt_private_jwk(ring, A, kid, other)  # encrypted under the wrong kid label
    with pytest.raises(KeyDecryptError, match="does not match"):
        decrypt_private_jwk(ring, A, kid, blob)


def test_rewrap_moves_to_current_kek():
    old = KekRing.parse(KekRing.new_entry("k1"))
    jwk, kid = generate_p256()
    blob = encrypt_private_jwk(old, A, kid, jwk)
    both = KekRing(dict(old.keks) | KekRing.parse(KekRing.new_entry("k2")).keks, "k2")
    new = rewrap(both, A, kid, blob)
    assert new["kek_id"] == "k2" and decrypt_private_jwk(KekRing({"k2": both.keks["k2"]}, "k2"), A, kid, new) == jwk


def test_ring_loading(tmp_path):
    with pytest.raises(ConfigError):
        KekRing.load(ring_text=None, ring_file=None, current=None, keys_dir=tmp_path, dev_mode=False)
    r = KekRing.load(ring_text=None, ring_file=None, current=None, keys_dir=tmp_path / "keys", dev_mode=True)
    f = tmp_path / "keys" / "dev.kek"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600 and r.current == "dev-1"
    again = KekRing.load(ring_text=None, ring_file=None, current=None, keys_dir=tmp_path / "keys", dev_mode=True)
    assert again.keks == r.keks  # generated once
    assert "dev-1" in repr(r) and base64.b64encode(r.keks["dev-1"]).decode() not in repr(r)
    with pytest.raises(ConfigError):
        KekRing.parse("k1:" + base64.b64encode(b"short").decode())
    with pytest.raises(ConfigError):
        KekRing.parse(KekRing.new_entry("k1"), current="k7")

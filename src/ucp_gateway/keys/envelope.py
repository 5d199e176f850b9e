"""Encryption at rest of private JWKs: AES-256-GCM under a versioned KEK ring.

Record (format v1, stored as JSON): ``{"v": 1, "kek_id": ..., "nonce": b64(12 random bytes),
"ct": b64(ciphertext||tag)}``. The AAD binds format version, company_id, kid and KEK id as
canonical JSON, so a row copied to another company or kid, or relabelled with another KEK, fails
to decrypt (NIST SP 800-38D; ``cryptography`` AESGCM). After decryption the RFC 7638 thumbprint is
recomputed and must equal ``kid``.

KEK ring sources, first found wins: ``UCPGW_KEK_RING`` (setting ``kek_ring``), the file named by
``kek_file``; in dev mode only, ``<keys_dir>/dev.kek`` is generated (mode 0600, git-ignored).
Ring text: ``id1:base64key1,id2:base64key2``; the newest (current) KEK is ``kek_current`` or the
last entry.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import ConfigError, GatewayError
from .rfc7638 import private_key_from_jwk, thumbprint

__all__ = [
    "FORMAT_VERSION",
    "KekRing",
    "KeyDecryptError",
    "decrypt_private_jwk",
    "encrypt_private_jwk",
    "rewrap",
]

FORMAT_VERSION = 1


class KeyDecryptError(GatewayError):
    """A stored private key could not be decrypted or does not match its kid (fail closed)."""

    code = "key_decrypt_failed"
    http_status = 500


@dataclass(frozen=True, slots=True)
class KekRing:
    """KEKs by id (32 bytes each) and the id new encryptions use."""

    keks: dict[str, bytes]
    current: str

    def __post_init__(self) -> None:
        if self.current not in self.keks:
            raise ConfigError(f"current KEK {self.current!r} is not in the ring")
        for kid, k in self.keks.items():
            if len(k) != 32:
                raise ConfigError(f"KEK {kid!r} must be 32 bytes (AES-256)")

    def __repr__(self) -> str:  # never print key bytes
        return f"KekRing(ids={sorted(self.keks)}, current={self.current!r})"

    @classmethod
    def parse(cls, text: str, current: str | None = None) -> KekRing:
        """Parse ``id:base64,id:base64`` (whitespace/newlines allowed). Raises ConfigError."""
        keks: dict[str, bytes] = {}
        last = None
        for part in text.replace("\n", ",").split(","):
            part = part.strip()
            if not part:
                continue
            kid, sep, b64 = part.partition(":")
            if not sep or not kid:
                raise ConfigError("KEK ring entries must look like id:base64")
            try:
                keks[kid.strip()] = base64.b64decode(b64.strip(), validate=True)
            except ValueError:
                raise ConfigError(f"KEK {kid!r} is not valid base64") from None
            last = kid.strip()
        if last is None:
            raise ConfigError("KEK ring is empty")
        return cls(keks, current or last)

    @staticmethod
    def new_entry(kek_id: str) -> str:
        """A fresh ``id:base64`` entry (32 random bytes) for an operator to add to the ring."""
        return f"{kek_id}:{base64.b64encode(secrets.token_bytes(32)).decode()}"

    @classmethod
    def load(
        cls,
        *,
        ring_text: str | None,
        ring_file: Path | None,
        current: str | None,
        keys_dir: Path,
        dev_mode: bool,
    ) -> KekRing:
        """Load the ring from env text, a secret file, or (dev only) a generated file."""
        if ring_text:
            return cls.parse(ring_text, current)
        if ring_file is not None:
            try:
                return cls.parse(ring_file.read_text(), current)
            except OSError as exc:
                raise ConfigError(f"cannot read KEK file {ring_file}: {exc.strerror}") from None
        if not dev_mode:
            raise ConfigError("no KEK ring: set UCPGW_KEK_RING or UCPGW_KEK_FILE")
        path = keys_dir / "dev.kek"
        if not path.exists():
            keys_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(cls.new_entry("dev-1") + "\n")
        return cls.parse(path.read_text(), current)


def _aad(company_id: UUID | str, kid: str, kek_id: str, v: int = FORMAT_VERSION) -> bytes:
    return json.dumps(
        {"company_id": str(company_id), "kek_id": kek_id, "kid": kid, "v": v},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()


def encrypt_private_jwk(ring: KekRing, company_id: UUID | str, kid: str, jwk: dict[str, Any]) -> dict[str, Any]:
    """Encrypt a private JWK under the current KEK with a fresh random 96-bit nonce."""
    nonce = os.urandom(12)
    pt = json.dumps(jwk, sort_keys=True, separators=(",", ":")).encode()
    ct = AESGCM(ring.keks[ring.current]).encrypt(nonce, pt, _aad(company_id, kid, ring.current))
    return {
        "v": FORMAT_VERSION,
        "kek_id": ring.current,
        "nonce": base64.b64encode(nonce).decode(),
        "ct": base64.b64encode(ct).decode(),
    }


def decrypt_private_jwk(ring: KekRing, company_id: UUID | str, kid: str, blob: dict[str, Any]) -> dict[str, Any]:
    """Decrypt and check a record. Raises KeyDecryptError (never returns unchecked material).

    Fails for an unknown format version or KEK id, a tampered or swapped record (GCM tag), or a
    plaintext whose thumbprint differs from ``kid`` / whose ``d`` does not match ``x``, ``y``.
    """
    try:
        v, kek_id = blob["v"], blob["kek_id"]
        nonce, ct = base64.b64decode(blob["nonce"]), base64.b64decode(blob["ct"])
    except (KeyError, TypeError, ValueError):
        raise KeyDecryptError(f"key {kid}: malformed encrypted record") from None
    if v != FORMAT_VERSION:
        raise KeyDecryptError(f"key {kid}: unknown record format {v!r}")
    kek = ring.keks.get(kek_id)
    if kek is None:
        raise KeyDecryptError(f"key {kid}: KEK {kek_id!r} is not in the ring")
    if len(nonce) != 12:
        raise KeyDecryptError(f"key {kid}: bad nonce")
    try:
        pt = AESGCM(kek).decrypt(nonce, ct, _aad(company_id, kid, kek_id, v))
    except InvalidTag:
        raise KeyDecryptError(f"key {kid}: decryption failed (tampered, moved, or wrong KEK)") from None
    jwk = json.loads(pt)
    try:
        private_key_from_jwk(jwk)
        ok = thumbprint(jwk) == kid
    except (KeyError, ValueError):
        ok = False
    if not ok:
        raise KeyDecryptError(f"key {kid}: decrypted key does not match its kid")
    return jwk


def rewrap(ring: KekRing, company_id: UUID | str, kid: str, blob: dict[str, Any]) -> dict[str, Any]:
    """Re-encrypt a record under the current KEK (fresh nonce). Like Fernet's ``rotate``."""
    return encrypt_private_jwk(ring, company_id, kid, decrypt_private_jwk(ring, company_id, kid, blob))

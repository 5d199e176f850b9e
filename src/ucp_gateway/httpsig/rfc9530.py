"""RFC 9530 Content-Digest: create and check over the message content as transferred.

Only ``sha-256`` and ``sha-512`` (RFC 9530 §5, "Active") are accepted. A field naming any other
algorithm is rejected as a whole (stricter than RFC 9530 §2, which lets recipients ignore members;
deprecated hashes must never stand in for a signature, §6.3). Every member must match.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass

import http_sf

from .errors import DigestMismatch

__all__ = ["ALGORITHMS", "DigestCheck", "check_content_digest", "content_digest", "parse_content_digest"]

ALGORITHMS = {"sha-256": hashlib.sha256, "sha-512": hashlib.sha512}
_SIMPLE = re.compile(r"(sha-256|sha-512)=:([A-Za-z0-9+/]*={0,2}):")


def content_digest(body: bytes, algorithm: str = "sha-256") -> str:
    """The Content-Digest field value for ``body`` (raw bytes), e.g. ``sha-256=:X48E...:``. RFC 9530 §2."""
    digest = ALGORITHMS[algorithm](body).digest()
    return f"{algorithm}=:{base64.b64encode(digest).decode('ascii')}:"


def parse_content_digest(value: str) -> dict[str, bytes]:
    """Parse a Content-Digest Dictionary into ``{algorithm: digest bytes}``.

    Raises DigestMismatch when the field is not a Dictionary of Byte Sequences or names an
    algorithm other than sha-256/sha-512 (RFC 9530 §2, §5).
    """
    m = _SIMPLE.fullmatch(value.strip(" "))
    if m:  # one plain member: skip http_sf's slow pure-Python byte-sequence parser
        try:
            return {m.group(1): base64.b64decode(m.group(2), validate=True)}
        except ValueError:
            raise DigestMismatch("Content-Digest is not a valid structured field") from None
    try:
        parsed = http_sf.parse(value.encode("latin-1"), tltype="dictionary")
    except Exception as exc:  # http_sf raises ValueError and friends on bad syntax
        raise DigestMismatch("Content-Digest is not a valid structured field") from exc
    out: dict[str, bytes] = {}
    for alg, (member, _params) in parsed.items():
        if alg not in ALGORITHMS:
            raise DigestMismatch(f"Content-Digest algorithm {alg!r} is not accepted (use sha-256 or sha-512)")
        if not isinstance(member, bytes):
            raise DigestMismatch("Content-Digest members must be byte sequences")
        out[alg] = member
    if not out:
        raise DigestMismatch("Content-Digest has no members")
    return out


@dataclass(frozen=True, slots=True)
class DigestCheck:
    """Result of a digest comparison, for the debug endpoint: received vs computed per algorithm."""

    received: dict[str, str]
    computed: dict[str, str]
    ok: bool


def compare_content_digest(value: str, body: bytes) -> DigestCheck:
    """Compare without raising on mismatch (syntax errors still raise DigestMismatch)."""
    members = parse_content_digest(value)
    received, computed, ok = {}, {}, True
    for alg, got in members.items():
        want = ALGORITHMS[alg](body).digest()
        received[alg] = base64.b64encode(got).decode("ascii")
        computed[alg] = base64.b64encode(want).decode("ascii")
        ok = hmac.compare_digest(got, want) and ok
    return DigestCheck(received, computed, ok)


def check_content_digest(value: str | None, body: bytes) -> None:
    """Require ``value`` to be a Content-Digest that matches ``body``. RFC 9530 §2; UCP signatures.md.

    Raises DigestMismatch (400) if the field is absent, malformed, uses another algorithm, or any
    member differs from the digest of ``body``.
    """
    if value is None:
        raise DigestMismatch("Content-Digest is required for a request with a body")
    m = _SIMPLE.fullmatch(value.strip(" "))
    if m is not None:  # one plain member, as parse_content_digest reads it
        try:
            got = binascii.a2b_base64(m.group(2), strict_mode=True)  # = base64.b64decode(validate=True)
        except binascii.Error:
            raise DigestMismatch("Content-Digest is not a valid structured field") from None
        ok = hmac.compare_digest(got, ALGORITHMS[m.group(1)](body).digest())
    else:
        ok = True
        for alg, got in parse_content_digest(value).items():
            ok = hmac.compare_digest(got, ALGORITHMS[alg](body).digest()) and ok
    if not ok:
        raise DigestMismatch("Content-Digest does not match the request body")


__all__ += ["compare_content_digest"]

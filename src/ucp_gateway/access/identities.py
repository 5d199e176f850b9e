"""The ``identity`` of the partner credentials that hold no secret (pure).

- ``web-bot-auth``: the origin of a signer's key directory (``Signature-Agent``),
  ``scheme://host[:port]`` lower-cased, default port dropped (:func:`origin_of`).
- ``mtls-cert``: ``sha256:<64 hex>``, the SHA-256 fingerprint of the DER certificate (one
  certificate, rotated by registering the next), or ``subject:<RFC 4514 name>`` (every certificate
  the trusted CA issues under that subject). :func:`certificate_identities` gives both for a
  presented certificate.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from ..errors import BadRequest

__all__ = ["certificate_identities", "normalise_identity", "origin_of"]

_HEX = re.compile(r"[0-9a-f]{64}")


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower-cased, the scheme's default port dropped."""
    p = urlsplit(url)
    scheme, host = p.scheme.lower(), (p.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host
    port = p.port
    return (
        f"{scheme}://{host}" if port in (None, {"https": 443, "http": 80}.get(scheme)) else f"{scheme}://{host}:{port}"
    )


def certificate_identities(cert: x509.Certificate) -> tuple[str, str]:
    """``("sha256:<hex>", "subject:<RFC 4514>")`` of a certificate, as registrations spell them."""
    return "sha256:" + cert.fingerprint(hashes.SHA256()).hex(), "subject:" + cert.subject.rfc4514_string()


def normalise_identity(kind: str, value: str) -> str:
    """The stored form of ``value`` for ``kind`` (``web-bot-auth`` | ``mtls-cert``). Raises BadRequest."""
    value = value.strip()
    if kind == "web-bot-auth":
        try:
            p = urlsplit(value)
            _ = p.port
        except ValueError:
            raise BadRequest("the directory must be an https origin") from None
        if p.scheme.lower() not in ("https", "http") or not p.hostname or p.username or p.password:
            raise BadRequest("the directory must be an https origin (https://agent.example)")
        return origin_of(value)
    if value.lower().startswith("sha256:"):
        digest = value[7:].replace(":", "").lower()
        if not _HEX.fullmatch(digest):
            raise BadRequest("a certificate fingerprint is sha256: and 64 hex digits")
        return "sha256:" + digest
    if value.lower().startswith("subject:"):
        try:
            name = x509.Name.from_rfc4514_string(value[8:])
        except ValueError:
            raise BadRequest("the subject must be an RFC 4514 name (CN=...,O=...)") from None
        if not len(name):
            raise BadRequest("the subject must not be empty")
        return "subject:" + name.rfc4514_string()
    raise BadRequest("an mtls-cert identity is sha256:<fingerprint> or subject:<RFC 4514 name>")

"""Signature errors with their UCP wire codes (UCP 2026-04-08 signatures.md, "Error Handling").

::

    Unauthorized (401)
     +-- SignatureMissing       signature_missing
     +-- SignatureInvalid       signature_invalid
     +-- KeyNotFound            key_not_found
    BadRequest (400)
     +-- DigestMismatch         digest_mismatch
     +-- AlgorithmUnsupported   algorithm_unsupported
          +-- KeyMalformed      profile_malformed (422)
     +-- InvalidProfileUrl      invalid_profile_url
    GatewayError (424)
     +-- ProfileUnreachable     profile_unreachable

Messages stay minimal on purpose (no oracle): unknown, retired and other-company kids all raise
:class:`KeyNotFound` with the same text. The debug endpoint gives the details to admins.
"""

from __future__ import annotations

from ..errors import BadRequest, GatewayError, Unauthorized

__all__ = [
    "AlgorithmUnsupported",
    "DigestMismatch",
    "InvalidProfileUrl",
    "KeyMalformed",
    "KeyNotFound",
    "ProfileUnreachable",
    "SignatureError",
    "SignatureInvalid",
    "SignatureMissing",
]


class SignatureError(Unauthorized):
    """Base of the 401 signature errors."""

    code = "signature_invalid"


class SignatureMissing(SignatureError):
    code = "signature_missing"


class SignatureInvalid(SignatureError):
    code = "signature_invalid"


class KeyNotFound(SignatureError):
    code = "key_not_found"


class DigestMismatch(BadRequest):
    code = "digest_mismatch"


class AlgorithmUnsupported(BadRequest):
    code = "algorithm_unsupported"


class KeyMalformed(AlgorithmUnsupported):
    """A profile key that is no key at all: a coordinate that is not base64url of the curve's size,
    or a point not on its curve. The profile is malformed (UCP overview "Error Handling": 422
    ``profile_malformed``), not a supported key of an unsupported algorithm. A subclass of
    AlgorithmUnsupported so the verifier tries the caller's other signatures alike."""

    code = "profile_malformed"
    http_status = 422


class InvalidProfileUrl(BadRequest):
    code = "invalid_profile_url"


class ProfileUnreachable(GatewayError):
    """The caller's profile could not be fetched (UCP overview "Error Handling": 424)."""

    code = "profile_unreachable"
    http_status = 424

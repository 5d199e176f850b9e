"""Discovery and negotiation errors (UCP 2026-04-08 overview, "Error Handling"; signatures.md).

::

    GatewayError
     +-- InvalidProfileUrl          invalid_profile_url        400
     +-- ProfileUnreachable         profile_unreachable        424
     +-- ProfileMalformed           profile_malformed          422
     +-- VersionUnsupported         version_unsupported        422
     +-- ProfileNotTrusted          profile_not_trusted        403
     +-- CapabilitiesIncompatible   capabilities_incompatible  200 (UCP error envelope, a business outcome)

``jsonrpc_code`` is the MCP error code (UCP overview "Error Handling": -32001 for discovery
failures; -32000 for ``profile_not_trusted`` by analogy with other 403s). Transport errors render
as ``{"code", "content"}``; ``CapabilitiesIncompatible.to_body`` renders the
UCP ``error_response`` envelope instead, so one error middleware handles every case.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import BadRequest, Forbidden, GatewayError

__all__ = [
    "CapabilitiesIncompatible",
    "InvalidProfileUrl",
    "ProfileMalformed",
    "ProfileNotTrusted",
    "ProfileUnreachable",
    "VersionUnsupported",
]


class InvalidProfileUrl(BadRequest):
    """UCP-Agent missing or malformed, profile URL not https, or its host resolves nowhere allowed."""

    code = "invalid_profile_url"
    http_status = 400
    jsonrpc_code: ClassVar[int] = -32001


class ProfileUnreachable(GatewayError):
    """Fetching the platform profile failed: timeout, connection, non-2xx, redirect."""

    code = "profile_unreachable"
    http_status = 424
    jsonrpc_code: ClassVar[int] = -32001


class ProfileMalformed(GatewayError):
    """The platform profile is not JSON, too large, or fails the UCP 2026-04-08 schema."""

    code = "profile_malformed"
    http_status = 422
    jsonrpc_code: ClassVar[int] = -32001


class VersionUnsupported(GatewayError):
    """The platform's protocol version is neither ours nor a key of our ``supported_versions``.

    The body also lists what is served, root first: ``{"code", "content", "supported_versions":
    [...]}`` (``details["supported_versions"]``), so a client can pick one without rediscovery."""

    code = "version_unsupported"
    http_status = 422
    jsonrpc_code: ClassVar[int] = -32001

    def to_body(self) -> dict[str, Any]:
        body = super().to_body()
        if "supported_versions" in self.details:
            body["supported_versions"] = list(self.details["supported_versions"])
        return body


class ProfileNotTrusted(Forbidden):
    """The company accepts only registered partners (allowlist mode) and this profile is not one."""

    code = "profile_not_trusted"
    http_status = 403
    jsonrpc_code: ClassVar[int] = -32000


class CapabilitiesIncompatible(GatewayError):
    """Empty intersection, or the operation needs a capability outside the negotiated set.

    A business outcome: HTTP 200 with the UCP ``error_response`` envelope (UCP overview, "Error
    Handling"; shopping/types/error_response.json).
    """

    code = "capabilities_incompatible"
    http_status: ClassVar[int] = 200

    def __init__(self, message: str = "", *, version: str, continue_url: str | None = None):
        super().__init__(message or "No mutually supported capabilities for this operation")
        self.version = version
        self.continue_url = continue_url

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ucp": {"version": self.version, "status": "error"},
            "messages": [{"type": "error", "code": self.code, "content": self.message, "severity": "unrecoverable"}],
        }
        if self.continue_url:
            body["continue_url"] = self.continue_url
        return body

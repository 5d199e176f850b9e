"""One error hierarchy for the whole gateway.

Every error the gateway raises on purpose derives from :class:`GatewayError` and carries its wire
``code``, a UCP ``severity`` and an ``http_status`` hint, so each transport maps errors to the wire in
exactly one place (REST: the error middleware; CLI: the exit-code map).

::

    GatewayError                      code            status
     +-- ConfigError                  config_invalid   (CLI / startup only)
     +-- NotFound                     not_found        404
     +-- Conflict                     conflict         409
     +-- BadRequest                   invalid_request  400
     +-- Unauthorized                 unauthorized     401
     +-- Forbidden                    forbidden        403
     +-- ServiceUnavailable           unavailable      503

Subpackages extend the tree (``httpsig``, ``keys``, ``discovery``, ``verbs``, ``commerce``) and set
``code`` / ``http_status`` as class attributes, like joserfc's ``JoseError.error``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import metrics

__all__ = [
    "BadRequest",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "GatewayError",
    "NotFound",
    "ServiceUnavailable",
    "Unauthorized",
]


class GatewayError(Exception):
    """Base of every deliberate gateway error.

    Args:
        message: human-readable text (goes to ``content`` on the wire; never secrets).
        code: overrides the class ``code`` for one instance (e.g. a more specific UCP code).
        details: extra JSON-safe fields a transport may add to its body.
    """

    code: ClassVar[str] = "internal_error"
    severity: ClassVar[str] = "unrecoverable"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str = "", *, code: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message or self.__class__.__name__)
        self.message = message or self.__class__.__name__
        if code is not None:
            self.code = code  # type: ignore[misc]  # instance override of the class default
        self.details = details or {}

    def to_body(self) -> dict[str, Any]:
        """The UCP protocol-error body ``{"code": ..., "content": ...}`` (UCP overview, Error Handling).
        Rendering one counts it (``ucpgw_http_errors_total{code}``)."""
        metrics.error(self.code)
        return {"code": self.code, "content": self.message}


class ConfigError(GatewayError):
    """Bad configuration: startup or a CLI command cannot go on."""

    code = "config_invalid"
    http_status = 500


class BadRequest(GatewayError):
    code = "invalid_request"
    http_status = 400


class Unauthorized(GatewayError):
    code = "unauthorized"
    http_status = 401


class Forbidden(GatewayError):
    code = "forbidden"
    http_status = 403


class NotFound(GatewayError):
    code = "not_found"
    http_status = 404


class Conflict(GatewayError):
    code = "conflict"
    http_status = 409


class ServiceUnavailable(GatewayError):
    code = "unavailable"
    http_status = 503

"""UCP checkout messages (S:shopping/types/message_error|warning|info.json).

Each constructor returns the wire dict. ``path`` is an RFC 9535 JSONPath into the response
(``$.line_items[0].quantity``). Codes follow error_code.json / warning_code.json / info_code.json and
the discount extension's code list.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "DISCOUNT_REJECTION_CODES",
    "SEVERITIES",
    "error",
    "error_envelope",
    "info",
    "warning",
]

SEVERITIES: Final = frozenset({"recoverable", "requires_buyer_input", "requires_buyer_review", "unrecoverable"})
DISCOUNT_REJECTION_CODES: Final = frozenset(
    {
        "discount_code_expired",
        "discount_code_invalid",
        "discount_code_already_applied",
        "discount_code_combination_disallowed",
        "discount_code_user_not_logged_in",
        "discount_code_user_ineligible",
    }
)


def error(code: str, content: str, *, severity: str = "recoverable", path: str | None = None) -> dict[str, Any]:
    """An error message. Raises ValueError on an unknown severity."""
    if severity not in SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}")
    msg: dict[str, Any] = {"type": "error", "code": code, "content": content, "severity": severity}
    if path:
        msg["path"] = path
    return msg


def warning(code: str, content: str, *, path: str | None = None, presentation: str | None = None) -> dict[str, Any]:
    """A warning message (the platform must display it)."""
    msg: dict[str, Any] = {"type": "warning", "code": code, "content": content}
    if path:
        msg["path"] = path
    if presentation:
        msg["presentation"] = presentation
    return msg


def info(content: str, *, code: str | None = None, path: str | None = None) -> dict[str, Any]:
    """An informational message."""
    msg: dict[str, Any] = {"type": "info", "content": content}
    if code:
        msg["code"] = code
    if path:
        msg["path"] = path
    return msg


def error_envelope(
    version: str, code: str, content: str, *, continue_url: str | None = None, severity: str = "unrecoverable"
) -> dict[str, Any]:
    """The HTTP-200 business error body with no resource (S:shopping/types/error_response.json)."""
    body: dict[str, Any] = {
        "ucp": {"version": version, "status": "error"},
        "messages": [error(code, content, severity=severity)],
    }
    if continue_url:
        body["continue_url"] = continue_url
    return body

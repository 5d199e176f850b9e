"""Request media type checks for the JSON routes (UCP REST binding, verb dispatch, admin API).

UCP REST (overview, "Transport: REST"): request and response bodies are ``application/json``. A body
sent under another type is refused with 415 rather than parsed anyway (RFC 9110 §15.5.16), so a
client never gets a write it did not label as JSON (e.g. a ``text/plain`` form that browsers may send
cross-site without a preflight).
"""

from __future__ import annotations

from aiohttp import web

from .errors import GatewayError

__all__ = ["JSON_MEDIA_TYPE", "UnsupportedMediaType", "require_json_body"]

JSON_MEDIA_TYPE = "application/json"


class UnsupportedMediaType(GatewayError):
    code = "unsupported_media_type"
    http_status = 415


def require_json_body(request: web.BaseRequest, body: bytes) -> None:
    """Refuse a non-empty ``body`` whose ``Content-Type`` is not ``application/json``.

    The type is compared case-insensitively without its parameters (``; charset=utf-8`` is fine),
    as aiohttp parses it (RFC 9110 §8.3.1); a missing header counts as ``application/octet-stream``.
    An empty body passes: there is nothing to interpret.

    Raises:
        UnsupportedMediaType: 415, ``unsupported_media_type``.
    """
    if body and request.content_type != JSON_MEDIA_TYPE:
        raise UnsupportedMediaType(f"Content-Type must be {JSON_MEDIA_TYPE}, not {request.content_type!r}")

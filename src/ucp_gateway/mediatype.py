"""Request media type checks for the JSON routes (UCP REST binding, verb dispatch, admin API), and
:func:`json_response`, how the gateway labels the JSON it answers.

UCP REST (overview, "Transport: REST"): request and response bodies are ``application/json``. A body
sent under another type is refused with 415 rather than parsed anyway (RFC 9110 §15.5.16), so a
client never gets a write it did not label as JSON (e.g. a ``text/plain`` form that browsers may send
cross-site without a preflight). JSON exchanged between systems MUST be UTF-8 (RFC 8259 §8.1), so a
``charset`` parameter other than ``utf-8`` is refused with 415 too: the body is not read as UTF-8
against its own label (RFC 8259 §11 defines no ``charset`` for the type; ``utf-8`` is tolerated).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .errors import BadRequest, GatewayError
from .jsonbody import InvalidJson, dumps_compact, loads_strict

__all__ = [
    "DECODED_CODINGS",
    "JSON_MEDIA_TYPE",
    "UnsupportedMediaType",
    "json_response",
    "json_type_problem",
    "read_json_object",
    "require_json_body",
]

JSON_MEDIA_TYPE = "application/json"
#: The content codings the UCP REST routes decode (``httpsig.messages.decoded_body``), besides ``identity``.
DECODED_CODINGS = ("gzip", "x-gzip", "deflate")


def json_response(data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """``data`` as compact UTF-8 JSON (:func:`.jsonbody.dumps_compact`, as UCP bodies and the fast
    paths' errors are written), labelled ``application/json`` with no ``charset`` parameter (RFC 8259
    §11 defines none), as every other JSON answer of the gateway is labelled;
    ``aiohttp.web.json_response`` adds ``; charset=utf-8``, so errors and data were labelled two ways."""
    return web.Response(body=dumps_compact(data), status=status, headers=headers, content_type=JSON_MEDIA_TYPE)


class UnsupportedMediaType(GatewayError):
    code = "unsupported_media_type"
    http_status = 415


def json_type_problem(request: web.BaseRequest, *, codings: tuple[str, ...] = ()) -> str | None:
    """Why the request's ``Content-Type`` does not label UTF-8 JSON, or None when it does.

    The type is compared case-insensitively without its parameters, as aiohttp parses it (RFC 9110
    §8.3.1); a missing header counts as ``application/octet-stream``. A ``charset`` parameter, if
    any, must be ``utf-8`` (any case, quoted or not): RFC 8259 §8.1. A ``Content-Encoding`` other
    than ``identity`` must be one of ``codings``, those the route decodes (RFC 9110 §8.4.1: an
    unsupported coding is a 415; read as is, a compressed body was refused as bad JSON, and a plain
    one labelled gzip was executed).
    Returns: the message for the caller (safe to show), or None.
    """
    lines = request.headers.getall("Content-Encoding", ())
    if len(lines) > 1:  # one reading for every layer: each reads the first line only
        return "send one Content-Encoding line"
    if lines:
        coding = lines[0].strip().lower()
        if coding not in ("", "identity") and coding not in codings:
            return f"Content-Encoding {coding[:40]!r} is not supported here: send the body uncompressed"
    if request.content_type != JSON_MEDIA_TYPE:
        return f"Content-Type must be {JSON_MEDIA_TYPE}, not {request.content_type!r}"
    charset = request.charset
    if charset is not None and charset.lower() != "utf-8":
        return f"Content-Type charset must be utf-8 (RFC 8259 §8.1), not {charset[:40]!r}"
    return None


def require_json_body(request: web.BaseRequest, body: bytes, *, codings: tuple[str, ...] = ()) -> None:
    """Refuse a non-empty ``body`` whose ``Content-Type`` is not ``application/json`` or names a
    charset other than UTF-8, or is sent in a content coding not among ``codings`` (those the route
    decodes) (:func:`json_type_problem`; ``; charset=utf-8`` is fine). An empty body passes: there
    is nothing to interpret.

    Raises:
        UnsupportedMediaType: 415, ``unsupported_media_type``.
    """
    if body:
        problem = json_type_problem(request, codings=codings)
        if problem is not None:
            raise UnsupportedMediaType(problem)


async def read_json_object(request: web.BaseRequest, *, example: str = "") -> dict[str, Any]:
    """The request body as a JSON object (``{}`` when empty), for the admin API's small bodies.

    ``request.read()`` even when the signature middleware already consumed the body (it returns the
    cached bytes). Raises :class:`UnsupportedMediaType` (415, :func:`require_json_body`) and
    :class:`~ucp_gateway.errors.BadRequest` ``body must be JSON: <why>`` (too deep, U+0000, ...) or
    ``body must be a JSON object`` (followed by ``, e.g. <example>`` when given).
    """
    raw = await request.read()
    require_json_body(request, raw)
    try:
        data = loads_strict(raw or b"{}")
    except InvalidJson as exc:
        raise BadRequest(f"body must be JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object" + (f", e.g. {example}" if example else ""))
    return data

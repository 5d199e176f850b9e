"""The gateway's own aiohttp middlewares, outermost first: request id + access log, errors, tenancy.

Errors are mapped to the wire in exactly one place (:func:`error_middleware`): a
:class:`~ucp_gateway.errors.GatewayError` becomes ``{"code", "content"}`` with its status; an
aiohttp HTTP error keeps its status with a JSON body; anything else is logged with the request id and
answered with a generic 500 that carries no stack trace.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from .appkeys import DATABASE, REQ_COMPANY, REQ_REQUEST_ID
from .errors import GatewayError
from .tenancy import HostCache

__all__ = ["ACCESS_LOG", "HOST_CACHE", "error_middleware", "json_error", "request_id_middleware", "tenancy_middleware"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# A concrete logger built once per app (after logging is configured): resolving structlog's lazy
# proxy on every request costs more than the rest of the middleware chain.
ACCESS_LOG = web.AppKey("access_log", object)
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
HOST_CACHE = web.AppKey("host_cache", HostCache)
_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "rate_limited",
    503: "unavailable",
}


def json_error(status: int, code: str, content: str, headers: dict[str, str] | None = None) -> web.Response:
    """A UCP protocol-error response: ``{"code": code, "content": content}`` with ``status``."""
    return web.json_response({"code": code, "content": content}, status=status, headers=headers)


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Honour a well-formed incoming ``Request-Id`` or make one; bind it to every log line; echo it."""
    incoming = request.headers.get("Request-Id", "")
    rid = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
    request[REQ_REQUEST_ID] = rid
    structlog.contextvars.bind_contextvars(request_id=rid)
    start = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        response.headers["Request-Id"] = rid
        return response
    except web.HTTPException as exc:
        status = exc.status
        exc.headers["Request-Id"] = rid
        raise
    finally:
        request.app[ACCESS_LOG].info(  # type: ignore[attr-defined]
            "request",
            method=request.method,
            path=request.path,
            status=status,
            duration_ms=round((time.perf_counter() - start) * 1000, 2),
        )
        structlog.contextvars.unbind_contextvars("request_id")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one place where errors become responses (REST transport)."""
    try:
        return await handler(request)
    except GatewayError as exc:
        headers = {"Retry-After": "1"} if exc.http_status in (429, 503) else None
        return web.json_response(exc.to_body(), status=exc.http_status, headers=headers)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        code = _HTTP_CODES.get(exc.status, "error")
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        return json_error(exc.status, code, exc.reason, headers)
    except ConnectionResetError:  # the client went away mid-request: nobody to answer, not a server fault
        request.app[ACCESS_LOG].info("client_disconnected", path=request.path)  # type: ignore[attr-defined]
        return json_error(400, "client_disconnected", "the client closed the connection")
    except Exception:  # the transport boundary: log with request id, answer a generic 500
        request.app[ACCESS_LOG].exception("unhandled_error", path=request.path)  # type: ignore[attr-defined]
        return json_error(500, "internal_error", "internal error; quote the Request-Id when reporting")


@web.middleware
async def tenancy_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Resolve ``Host`` to a company (``request[REQ_COMPANY]``); None means the platform node.

    Health probes skip the lookup so ``/healthz`` works while the database is down.
    """
    if request.path in ("/healthz", "/readyz"):
        request[REQ_COMPANY] = None
        return await handler(request)
    app = request.app
    request[REQ_COMPANY] = await app[HOST_CACHE].resolve(app[DATABASE].pool, request.host)
    return await handler(request)

"""The gateway's own aiohttp middleware: request id + access log, errors, tenancy, in one layer.

Errors are mapped to the wire in exactly one place (:func:`foundation_middleware`): a
:class:`~ucp_gateway.errors.GatewayError` becomes ``{"code", "content"}`` with its status; an
aiohttp HTTP error keeps its status with a JSON body; a database outage (``db.outage.is_outage``)
is 503 ``unavailable`` with ``Retry-After``, not logged per request; anything else is logged with
the request id and answered with a generic 500 that carries no stack trace.

Two per-path hooks let subsystems act on their own paths without an aiohttp middleware layer that
every request of every path would pay for (``create_app`` makes both dicts; a subsystem adds entries
in its ``setup``):

- ``app[PATH_WRAPPERS][path]``: ``async (request, call) -> response``, run OUTSIDE this layer (around
  request id, error mapping and every subsystem middleware) for requests to exactly ``path``;
  ``call(request)`` runs the rest. The MCP binding rewrites REST-shaped errors into JSON-RPC here.
- ``app[PUBLIC_FAST_PATHS][path]``: a :class:`PublicPath` ``(handler, answer)``. ``answer(request,
  host) -> response | None`` is sync (``host`` is ``request.host``) and is asked once the router
  matched ``handler`` and the Host is known to the host cache (``HostCache.known``: resolved within
  its ``known_grace``, revalidated when stale), before the subsystem middlewares.
  It answers a public document from a cache, or returns None and the request takes the full path.
  It must answer byte-for-byte what the full path would, so it may answer only requests that no
  subsystem middleware would act on (discovery's ``/.well-known/ucp``); the foundation adds
  ``Request-Id`` and ``Server`` to both alike. It must not read ``request.match_info`` or
  ``request.app``: the front path asks it before routing.

The front path (:func:`front_handler`, installed by ``serve.run_server``): the same answers, asked
BEFORE aiohttp's router and middleware chain (``Application._handle``: router resolve, middleware
partials and one coroutine per layer), which cost more than the rest of a cached answer. It answers
a request only where this layer would have answered it from the same ``PublicPath``: a GET or HEAD
whose request target is exactly the path (no query, no escapes, so no ``%00``), for a method the
router was seen to send to ``handler`` at that exact target (:attr:`PublicPath.methods`, learnt by
this layer; the router is frozen once serving), without ``Expect`` and without a path wrapper, with
a Host known to the host cache; everything else, a decline and a fault go to aiohttp's
handler unchanged (a fault is then met and logged again by this layer, with the request id).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Awaitable, Callable
from functools import partial

from aiohttp import hdrs, web
from multidict import istr

from .appkeys import DATABASE, REQ_COMPANY, REQ_REQUEST_ID
from .db.outage import as_outage
from .errors import BadRequest, GatewayError
from .hostcache import HostCache
from .logs import REQUEST_ID_VAR
from .mediatype import json_response
from .metrics import observe_request
from .tenancy import valid_host_header

__all__ = [
    "ACCESS_LOG",
    "ACCESS_LOG_ON",
    "FOUNDATION",
    "HOST_CACHE",
    "PATH_WRAPPERS",
    "PUBLIC_FAST_PATHS",
    "SERVER",
    "FastPath",
    "Foundation",
    "PathWrapper",
    "PublicPath",
    "challenge",
    "foundation_middleware",
    "front_handler",
    "json_error",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PathWrapper = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]
FastPath = Callable[[web.Request, str], "web.StreamResponse | None"]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]
RawHandler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]  # aiohttp's web.Server request_handler


class PublicPath:
    """A ``app[PUBLIC_FAST_PATHS]`` entry (module doc): ``answer`` stands in for the route handler
    ``handler`` on fresh cached answers. ``methods``: the methods the router was seen to send to
    ``handler`` at exactly this path (filled by the foundation layer, read by the front path)."""

    __slots__ = ("answer", "handler", "methods")

    def __init__(self, handler: Handler, answer: FastPath):
        self.handler = handler
        self.answer = answer
        self.methods: set[str] = set()


PATH_WRAPPERS = web.AppKey("path_wrappers", dict[str, PathWrapper])
PUBLIC_FAST_PATHS = web.AppKey("public_fast_paths", dict[str, PublicPath])
_WRAPPED = web.RequestKey("ucpgw.path_wrapped", bool)  # the path wrapper already runs around this layer
# A concrete logger built once per app (after logging is configured): resolving structlog's lazy
# proxy on every request costs more than the rest of the middleware chain.
ACCESS_LOG = web.AppKey("access_log", object)
ACCESS_LOG_ON = web.AppKey("access_log_on", bool)  # ACCESS_LOG emits info lines (decided once, at build)
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
    return json_response({"code": code, "content": content}, status=status, headers=headers)


_IDS: list[str] = []  # ready request ids, taken from the end (list.pop: no Python call per request)


def _refill_ids() -> str:
    """A fresh request id (32 random hex digits, as ``uuid4().hex`` long); the other 255 cut from the
    same 4 KiB ``os.urandom`` buffer wait in :data:`_IDS`. A forked child starts empty (no shared ids)."""
    buf = os.urandom(4096)
    _IDS[:] = [buf[i : i + 16].hex() for i in range(16, 4096, 16)]
    return buf[:16].hex()


os.register_at_fork(after_in_child=_IDS.clear)


def _new_request_id() -> str:
    return _IDS.pop() if _IDS else _refill_ids()


class Foundation:
    """The foundation layer's per-app state, read with ONE app lookup per request.

    ``create_app`` builds it and also publishes each part under its own key (``HOST_CACHE``,
    ``ACCESS_LOG``, ``ACCESS_LOG_ON``, ``PATH_WRAPPERS``, ``PUBLIC_FAST_PATHS``): the same objects,
    so a subsystem that adds a path wrapper or fast path through those keys is seen here.
    """

    __slots__ = ("access_log", "fast_paths", "host_cache", "log_on", "metrics_on", "middleware", "timed", "wrappers")

    def __init__(
        self,
        host_cache: HostCache,
        access_log: object,
        log_on: bool,
        wrappers: dict[str, PathWrapper],
        fast_paths: dict[str, PublicPath],
        metrics_on: bool = False,
    ):
        self.host_cache = host_cache
        self.metrics_on = metrics_on  # observe every answer (ucp_gateway.metrics)
        self.timed = log_on or metrics_on
        self.access_log = access_log
        self.log_on = log_on
        self.wrappers = wrappers
        self.fast_paths = fast_paths
        self.middleware: Middleware | None = None  # foundation_middleware(self), once made


FOUNDATION = web.AppKey("foundation", Foundation)
_MISS = HostCache.MISS


def _map_error(request: web.Request, exc: Exception) -> web.Response:
    """The one error mapper (REST transport); call it inside the ``except`` block (the 500 branch
    logs the active exception). Re-raises HTTP exceptions that are not errors (< 400) or are JSON."""
    if not isinstance(exc, GatewayError):
        # the database went away under a query: an outage (503), logged once by the pool, not here
        exc = as_outage(exc) or exc
    if isinstance(exc, GatewayError):
        headers = None
        if exc.http_status in (429, 503):
            headers = {"Retry-After": str(exc.details.get("retry_after", 1))}
        return json_response(exc.to_body(), status=exc.http_status, headers=headers)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400 or exc.content_type == "application/json":
            raise exc
        code = _HTTP_CODES.get(exc.status, "error")
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        return json_error(exc.status, code, exc.reason, headers)
    if isinstance(exc, ConnectionResetError):  # the client went away mid-request: not a server fault
        request.app[ACCESS_LOG].info("client_disconnected", path=request.path)  # type: ignore[attr-defined]
        return json_error(400, "client_disconnected", "the client closed the connection")
    # the transport boundary: log with request id, answer a generic 500
    request.app[ACCESS_LOG].exception("unhandled_error", path=request.path)  # type: ignore[attr-defined]
    return json_error(500, "internal_error", "internal error; quote the Request-Id when reporting")


SERVER = "ucp-gateway"  # the Server header: no framework or Python version on the wire
# header names as istr: a case-insensitive lookup or set with a plain str folds the name every time
_REQUEST_ID = istr("Request-Id")
_SERVER = hdrs.SERVER
_EXPECT = hdrs.EXPECT
_HOST = hdrs.HOST
_RETRY_AFTER = hdrs.RETRY_AFTER
_WWW_AUTHENTICATE = hdrs.WWW_AUTHENTICATE


def challenge(request: web.BaseRequest) -> str:
    """The ``WWW-Authenticate`` of a 401 that set none (RFC 9110 §11.6.1 requires one): UCP's
    ``Bearer realm="ucp"`` (overview "Error Handling"), with ``error="invalid_token"`` (RFC 6750
    §3.1) when the request carried a bearer token. Added here, the one place every 401 leaves by;
    a route with a more specific challenge (the token endpoint's ``Basic``) sets its own."""
    auth = request.headers.get(hdrs.AUTHORIZATION, "")
    if auth[:7].lower() == "bearer ":
        return 'Bearer realm="ucp", error="invalid_token"'
    return 'Bearer realm="ucp"'


def _authority(target: str) -> str:
    """The lower-cased authority of an absolute-form request target (``http://Shop.Example:8080/x``
    -> ``shop.example:8080``); ``""`` for any other form (``*``, garbage)."""
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return ""
    end = len(rest)
    for c in "/?#":
        i = rest.find(c)
        if 0 <= i < end:
            end = i
    return rest[:end].lower()


def foundation_middleware(state: Foundation) -> Middleware:
    """The foundation layer for one app (``create_app`` installs ``foundation_middleware(state)``):
    request id + access log, the error mapper and tenancy, in one aiohttp middleware.

    1. Honour a well-formed incoming ``Request-Id`` or make one; bind it to every log line; echo it.
    2. Errors become responses here and only here: a :class:`GatewayError` -> ``{"code", "content"}``
       with its status; an aiohttp HTTP error keeps its status with a JSON body; anything else is
       logged and answered with a generic 500 without a trace.
    3. ``Host`` -> company (``request[REQ_COMPANY]``; None = platform node) through the host cache.
       Health probes skip the lookup so ``/healthz`` works while the database is down (and without
       a Host header); any other request without one is refused (400 ``invalid_request``): an
       HTTP/1.0 request may omit it, and aiohttp's ``request.host`` would then be the server's own
       address, serving whichever company is bound to it (RFC 9112 §3.2 requires Host in HTTP/1.1;
       aiohttp refuses that, and two Host lines, in its parser before any handler runs).
    4. ``Server: ucp-gateway`` and ``Request-Id`` on every response (and on a re-raised HTTP
       exception). Set here rather than by an ``on_response_prepare`` receiver, which every
       response would pay for; a handler that prepares a ``StreamResponse`` itself sets them itself.

    Before 1, a wrapper in ``state.wrappers`` for this path runs around all of it. A
    ``state.fast_paths`` entry may answer a cached public document once the router matched its
    handler and the host cache has a fresh answer for the Host (module doc); it then skips request
    storage and the ContextVar (nothing reads them on that answer) but not the request id, ``%00``
    refusal, tenancy, headers or log line. Here the entry also learns which methods the router sends
    to its handler at exactly its path, for the front path (:func:`front_handler`).

    The per-app state is bound in a closure (no app lookup per request), and it is one layer
    instead of three: each aiohttp middleware costs a partial call and a coroutine per request,
    which showed in the discovery benchmark.
    """
    host_cache = state.host_cache
    access_log = state.access_log
    log_on = state.log_on
    metrics_on, timed = state.metrics_on, state.timed
    wrappers = state.wrappers
    fast_paths = state.fast_paths
    ids = _IDS

    @web.middleware
    async def foundation(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path in wrappers and _WRAPPED not in request:
            request[_WRAPPED] = True
            try:
                response = await wrappers[path](request, partial(foundation, handler=handler))
            except web.HTTPException as exc:
                exc.headers[_SERVER] = SERVER
                raise
            response.headers[_SERVER] = SERVER
            return response
        incoming = request.headers.get(_REQUEST_ID)
        rid = incoming if incoming and _SAFE_ID.match(incoming) else (ids.pop() if ids else _refill_ids())
        start = time.perf_counter() if timed else 0.0
        public = fast_paths.get(path)
        # only the route it stands in for (404/405 and other handlers take the full path), and the key,
        # a plain path, has no %00: the query must not either
        if public is not None and (request.match_info.handler is not public.handler or "\x00" in request.query_string):
            public = None
        if public is not None:
            method = request.method
            if method not in public.methods and request.raw_path == path:
                public.methods.add(method)  # the router sends this exact target here: the front path may answer it
            host = request.headers.get(_HOST)  # None: refused on the full path
            if host is not None and request.raw_path[:1] != "/":
                host = None  # an absolute-form target: the full path checks it against Host
            # a public document needs only a known Host (HostCache.known); a miss: the full path resolves it
            if host is not None and host_cache.known(host):
                try:
                    response = public.answer(request, host)
                except Exception:  # a fault in the fast path: the full path answers (a decline, logged)
                    access_log.exception("fast_path_failed", path=path, request_id=rid)  # type: ignore[attr-defined]
                    response = None
                if response is not None:
                    return _fast_answered(
                        response, request, path, rid, start, access_log if log_on else None, metrics_on
                    )
                public = None  # declined or failed: not asked again below
        request[REQ_REQUEST_ID] = rid
        # one ContextVar read by the logging processor (logs.add_request_id): cheaper than structlog's
        # bind_contextvars/reset_contextvars pair on every request, and the same request_id on every line
        token = REQUEST_ID_VAR.set(rid)
        status = 500
        try:
            try:
                if "\x00" in path or "\x00" in request.query_string:
                    # %00 decodes to U+0000, which no PostgreSQL text column can hold: refuse it here
                    raise BadRequest("the request target must not contain %00")
                if path == "/healthz" or path == "/readyz":
                    request[REQ_COMPANY] = None
                else:
                    host = request.headers.get(_HOST)
                    if host is None:  # HTTP/1.0 (aiohttp refuses HTTP/1.1 without Host): no tenant to serve
                        raise BadRequest("the request has no Host header")
                    if request.raw_path[:1] != "/" and _authority(request.raw_path) != host.lower():
                        # absolute-form (RFC 9112 §3.2.2): aiohttp's request.host, which the handlers
                        # use, is then the target's host; the tenant is chosen by Host here, so the two
                        # must name one host (else one company's documents under another's host)
                        raise BadRequest("the request target's authority does not match the Host header")
                    company = host_cache.cached(host)  # a hit costs no coroutine
                    if company is _MISS:
                        # only a plain host[:port] is resolved (and so cached): tenancy and aiohttp's
                        # request.host then read it alike (``a:x@b`` was company a to tenancy, b to yarl)
                        if not valid_host_header(host):
                            raise BadRequest("invalid Host header")
                        company = await host_cache.resolve(request.app[DATABASE].pool, host)
                    request[REQ_COMPANY] = company  # type: ignore[assignment]
                response = None
                if public is not None:  # a Host the host cache had to resolve first
                    try:
                        response = public.answer(request, request.host)
                    except Exception:  # as above: the handler answers
                        access_log.exception("fast_path_failed", path=path)  # type: ignore[attr-defined]
                if response is None:
                    response = await handler(request)
            except Exception as exc:  # mapped (or re-raised) by the one error mapper
                response = _map_error(request, exc)
            status = response.status
            headers = response.headers
            if status == 401 and _WWW_AUTHENTICATE not in headers:
                headers[_WWW_AUTHENTICATE] = challenge(request)
            elif status == 503 and _RETRY_AFTER not in headers:  # every 503 says when to come back
                headers[_RETRY_AFTER] = "1"
            headers[_REQUEST_ID] = rid
            headers[_SERVER] = SERVER
            return response
        except web.HTTPException as exc:  # < 400 or already JSON: aiohttp sends it as it is
            status = exc.status
            exc.headers[_REQUEST_ID] = rid
            exc.headers[_SERVER] = SERVER
            raise
        finally:
            if log_on:
                _access(access_log, request, path, status, start)
            if metrics_on:
                observe_request(request, None, status, time.perf_counter() - start, request.get(REQ_COMPANY))
            REQUEST_ID_VAR.reset(token)

    state.middleware = foundation
    return foundation


def _fast_answered(
    response: web.StreamResponse,
    request: web.BaseRequest,
    path: str,
    rid: str,
    start: float,
    log: object | None,
    metrics_on: bool = False,
) -> web.StreamResponse:
    """A fast answer leaves with ``Request-Id`` and ``Server``, and its access-log line when ``log``
    (the access logger, None when info lines are off) is given: the same from this layer and the front."""
    headers = response.headers
    headers[_REQUEST_ID] = rid
    headers[_SERVER] = SERVER
    if metrics_on:
        observe_request(request, path, response.status, time.perf_counter() - start)
    if log is not None:
        token = REQUEST_ID_VAR.set(rid)
        try:
            _access(log, request, path, response.status, start)
        finally:
            REQUEST_ID_VAR.reset(token)
    return response


async def _ready(response: web.StreamResponse) -> web.StreamResponse:
    return response


def front_handler(state: Foundation, handle: RawHandler) -> RawHandler:
    """The front path (module doc): a ``web.Server`` request handler that answers ``state.fast_paths``
    entries before aiohttp's router and middleware chain, and hands every other request to ``handle``
    (the application's own handler, ``Application._handle``) as it came.

    Args:
        state: the foundation state of the app that ``handle`` serves (its first middleware must be
            ``state.middleware``, so that this answers exactly what that layer would).
        handle: the server's request handler before this one.
    Returns: ``(request) -> awaitable response``; a plain function, so a request it does not answer
        costs one call and no extra coroutine.
    """
    host_cache = state.host_cache
    access_log = state.access_log
    log_on = state.log_on
    metrics_on, timed = state.metrics_on, state.timed
    wrappers = state.wrappers
    fast_paths = state.fast_paths
    ids = _IDS

    def front(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        path = request.raw_path  # the request target as received: equal to a key only without query or escapes
        public = fast_paths.get(path)
        if public is None or request.method not in public.methods:
            return handle(request)
        headers = request.headers
        if _EXPECT in headers or path in wrappers:  # aiohttp answers Expect before routing; a wrapper runs around
            return handle(request)
        host = headers.get(_HOST)  # without one, the foundation layer answers (400)
        if host is None or not host_cache.known(host):
            return handle(request)
        start = time.perf_counter() if timed else 0.0
        try:
            response = public.answer(request, host)  # type: ignore[arg-type]
        except Exception:  # the foundation layer asks again, and logs the fault with the request id
            response = None
        if response is None:
            return handle(request)
        incoming = headers.get(_REQUEST_ID)
        rid = incoming if incoming and _SAFE_ID.match(incoming) else (ids.pop() if ids else _refill_ids())
        return _ready(_fast_answered(response, request, path, rid, start, access_log if log_on else None, metrics_on))

    return front


def _access(access_log: object, request: web.Request, path: str, status: int, start: float) -> None:
    access_log.info(  # type: ignore[attr-defined]
        "request",
        method=request.method,
        path=path,
        status=status,
        duration_ms=round((time.perf_counter() - start) * 1000, 2),
    )

"""The UCP MCP binding: JSON-RPC 2.0 over Streamable HTTP at ``/ucp/mcp`` (aiohttp).

UCP checkout-mcp.md / overview "Transport Layer" and the MCP 2025-11-25 "Streamable HTTP"
transport: the client POSTs one JSON-RPC message (a batch only under 2025-03-26) and gets
``application/json`` back; notifications get 202. This server keeps no session: GET (no
standalone stream) and DELETE are 405. A call that needs the person's confirmation asks it inside
the call where the client declared elicitation (:mod:`.mcp_elicit`: a request-scoped SSE stream, or
2026-07-28's ``input_required``; the only ``Mcp-Session-Id`` is a signed copy of that declaration).

The JSON-RPC methods and who calls them: :mod:`.mcp_methods`.

Errors: protocol errors become JSON-RPC ``error`` with the HTTP status as primary signal
(:func:`.jsonrpc.rpc_error_from_gateway`); errors raised before the handler (signatures, tenancy,
body size) are rewritten by :func:`mcp_error_wrapper`; business outcomes are ``result``.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from aiohttp import web

from ..appkeys import REQ_COMPANY, open_door
from ..errors import GatewayError, NotFound
from ..jsonbody import InvalidJson, loads_strict
from ..mediatype import json_response, json_type_problem
from . import jsonrpc
from . import mcp_elicit as elicit
from .jsonrpc import RpcError
from .mcp_methods import PROTOCOL_VERSIONS, SESSION, Handlers, principal_for
from .mcp_modern import MODERN_VERSIONS, check_modern, stamp_result
from .mcp_tooldefs import MCP_TOOLS, InvalidProfileUrl, McpCall, McpTool, profile_from_meta

__all__ = [
    "MCP_PATH",
    "MCP_TOOLS",
    "PROTOCOL_VERSIONS",
    "InvalidProfileUrl",
    "McpCall",
    "McpTool",
    "mcp_error_wrapper",
    "mcp_get",
    "mcp_post",
    "principal_for",
    "profile_from_meta",
]

MCP_PATH = "/ucp/mcp"
UNSUPPORTED_PROTOCOL_VERSION = -32022  # MCP 2026-07-28: data {supported, requested}, HTTP 400


def _origin_ok(request: web.Request) -> bool:
    """MCP transports spec: validate Origin (DNS rebinding). Absent Origin: not a browser."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    host = urlsplit(origin).netloc.lower()
    return host == request.host.lower()


def _rpc_response(outcome: jsonrpc.Outcome) -> web.Response:
    if outcome.body is None:
        return web.Response(status=202)
    # a 429 or 503 says when to come back, in the header as in error.data.retry_after
    headers = None
    if outcome.http_status in (429, 503):
        data = ((outcome.body or {}).get("error") or {}).get("data") if isinstance(outcome.body, dict) else None
        retry = data.get("retry_after") if isinstance(data, dict) else None
        headers = {"Retry-After": str(retry if isinstance(retry, int) and retry > 0 else 1)}
    return json_response(outcome.body, status=outcome.http_status, headers=headers)


@open_door
async def mcp_post(request: web.Request) -> web.Response:
    """POST /ucp/mcp: one JSON-RPC message (or a 2025-03-26 batch). Refusals before the JSON-RPC
    layer echo the request's id when the body has one (never ``id: null`` for a request)."""
    if not _origin_ok(request):
        err = RpcError(jsonrpc.UCP_PROTOCOL_ERROR, "Origin not allowed", {"code": "forbidden"}, http_status=403)
        return json_response(jsonrpc.error_response(_request_id(await request.read()), err), status=403)
    version = request.headers.get("MCP-Protocol-Version")
    if version is not None and version not in PROTOCOL_VERSIONS and version not in MODERN_VERSIONS:
        err = RpcError(UNSUPPORTED_PROTOCOL_VERSION, f"unsupported MCP-Protocol-Version {version[:40]!r}",
                       {"supported": [*PROTOCOL_VERSIONS, *MODERN_VERSIONS], "requested": version[:40]},
                       http_status=400)  # fmt: skip
        return json_response(jsonrpc.error_response(_request_id(await request.read()), err), status=400)
    company = request.get(REQ_COMPANY)
    if company is None:
        raise NotFound("this host serves no company")
    principal = await principal_for(request, company)
    body = await request.read()
    problem = json_type_problem(request) if body else None  # MCP Streamable HTTP: JSON-RPC is application/json
    if problem is not None:
        err = RpcError(jsonrpc.INVALID_REQUEST, problem, {"code": "unsupported_media_type"}, http_status=415)
        return json_response(jsonrpc.error_response(_request_id(body), err), status=415)
    handlers = Handlers(request, company, principal)
    try:
        message = loads_strict(body)
    except InvalidJson:
        message = None
    if version in MODERN_VERSIONS:  # stateless revision: headers and _meta on every request, stamped results
        err = check_modern(request.headers, message, version)
        if err is not None:
            return json_response(jsonrpc.error_response(_request_id(body), err), status=err.http_status)
    elif elicit.is_response(message):  # the client's answer to a question we asked (mcp_elicit)
        return await elicit.answer_post(request, company.id, principal.key if principal else None, message)
    outcome = await jsonrpc.handle_payload(body, handlers.methods(), allow_batch=jsonrpc.batch_allowed(version)
                                           and version not in MODERN_VERSIONS)  # fmt: skip
    asked = await elicit.ask_person(request, company.id, version, message, jsonrpc.error_for)
    if isinstance(asked, web.StreamResponse):
        return asked
    if asked is not None:
        outcome = jsonrpc.Outcome(jsonrpc.success_response(message["id"], asked), 200)
    if version in MODERN_VERSIONS:
        method = message.get("method") if isinstance(message, dict) else None
        outcome = jsonrpc.Outcome(stamp_result(method, outcome.body), outcome.http_status)
    resp = _rpc_response(outcome)
    if SESSION in request:
        resp.headers[elicit.SESSION_HEADER] = request[SESSION]
    return resp


async def mcp_get(request: web.Request) -> web.Response:
    """GET/DELETE /ucp/mcp: no server-initiated stream, no sessions (MCP: 405 is allowed)."""
    raise web.HTTPMethodNotAllowed(request.method, ["POST"])


def _request_id(raw: bytes) -> str | int | None:
    try:
        obj = loads_strict(raw)
    except InvalidJson:
        return None
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


async def mcp_error_wrapper(request: web.Request, handler) -> web.StreamResponse:
    """On ``POST /ucp/mcp``: turn a REST-shaped protocol error (``{"code","content"}`` from the
    error, tenancy or signature layers) into a JSON-RPC error with the same HTTP status.

    Registered as ``app[PATH_WRAPPERS][MCP_PATH]`` (``ucp_gateway.middleware``): it runs around the
    foundation layer for this path only, so no other path pays for an extra middleware layer.
    """
    if request.method != "POST":
        return await handler(request)
    try:
        resp = await handler(request)
    except web.HTTPException as exc:
        rid = {"Request-Id": exc.headers["Request-Id"]} if "Request-Id" in exc.headers else None
        resp = json_response({"code": "invalid_request", "content": exc.reason}, status=exc.status, headers=rid)
    if resp.status < 400 or not isinstance(resp, web.Response) or not isinstance(resp.body, bytes):
        return resp
    try:
        body = json.loads(resp.body)
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and body.get("jsonrpc") == "2.0":
        return resp
    code = body.get("code") if isinstance(body, dict) and isinstance(body.get("code"), str) else "error"
    content = body.get("content") if isinstance(body, dict) and isinstance(body.get("content"), str) else ""
    exc = GatewayError(content or code, code=code)
    exc.http_status = resp.status  # type: ignore[misc]  # instance override: keep the wire status
    err = jsonrpc.rpc_error_from_gateway(exc)
    try:
        raw = await request.read()
    except (web.HTTPException, OSError, ValueError):  # body too large or already consumed
        raw = b""
    out = json_response(jsonrpc.error_response(_request_id(raw), err), status=err.http_status)
    for h in ("Retry-After", "WWW-Authenticate", "Request-Id"):
        if h in resp.headers:
            out.headers[h] = resp.headers[h]
    return out

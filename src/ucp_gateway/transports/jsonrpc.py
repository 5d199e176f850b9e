"""A small JSON-RPC 2.0 layer (pure apart from awaiting the method handlers).

JSON-RPC 2.0 specification (jsonrpc.org/specification): request ``{"jsonrpc":"2.0","method",
"params"?,"id"?}``; a request without ``id`` is a notification and gets no response; errors
``-32700`` parse error, ``-32600`` invalid request, ``-32601`` method not found, ``-32602`` invalid
params, ``-32603`` internal error. Batches (arrays) are answered with an array, notifications left
out; an empty array is an invalid request.

MCP removed batching in protocol revision 2025-06-18; callers pass ``allow_batch`` from the
negotiated revision (see :func:`batch_allowed`).

UCP's MCP binding (checkout-mcp.md, overview "Error Handling") maps protocol errors as:
``-32001`` discovery / version (400 invalid_profile_url, 422, 424), ``-32000`` authentication,
permission, idempotency conflict, rate limit, unavailable (401/403/409/429/503, with
``data.retry_after`` for 429 and 503), ``-32600`` digest_mismatch / algorithm_unsupported,
``-32603`` internal. ``data.code`` carries the UCP code. :func:`rpc_error_from_gateway` does this;
an internal error says no more than ``internal_error``, except ``company_misconfigured`` (the
operator's settings, said as such: its message names a settings path, nothing internal).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..company_settings import CompanyMisconfigured
from ..db.outage import as_outage
from ..errors import GatewayError
from ..jsonbody import InvalidJson, loads_strict

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "UCP_DISCOVERY_ERROR",
    "UCP_PROTOCOL_ERROR",
    "Method",
    "Outcome",
    "Request",
    "RpcError",
    "batch_allowed",
    "error_for",
    "error_response",
    "handle_payload",
    "rpc_error_from_gateway",
    "success_response",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UCP_PROTOCOL_ERROR = -32000  # UCP: auth, permission, 409, 429, 503
UCP_DISCOVERY_ERROR = -32001  # UCP: discovery / negotiation / version

_SIGNATURE_FORMAT_CODES = frozenset({"digest_mismatch", "algorithm_unsupported"})
_DISCOVERY_CODES = frozenset({"invalid_profile_url", "profile_unreachable", "profile_malformed", "version_unsupported"})
# revisions that allow JSON-RPC batches (MCP 2025-03-26 added them, 2025-06-18 removed them)
_BATCH_REVISIONS = frozenset({"2025-03-26"})
#: Requests per batch (JSON-RPC 2.0 sets no bound): a 1 MiB batch of tools/list asked for ~540 MB of
#: answer and held the event loop for seconds (security review); an agent needs a handful.
MAX_BATCH = 32


class RpcError(Exception):
    """A JSON-RPC error object plus the HTTP status to send it with (200 unless UCP says otherwise).

    Args:
        code: JSON-RPC error code. message: short text. data: JSON-safe extra (UCP ``data.code``).
        http_status: the HTTP status for a single (non-batch) response.
    """

    def __init__(self, code: int, message: str, data: Any = None, *, http_status: int = 200):
        super().__init__(message)
        self.code, self.message, self.data, self.http_status = code, message, data, http_status

    def to_object(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


@dataclass(frozen=True, slots=True)
class Request:
    """One well-formed request or notification. ``id`` is a str, an int or None (notification)."""

    method: str
    params: Mapping[str, Any] | list[Any] | None
    id: str | int | None
    notification: bool


Method = Callable[[Request], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to send back: ``body`` (dict, list, or None for 202 Accepted) and the HTTP status."""

    body: dict[str, Any] | list[dict[str, Any]] | None
    http_status: int


def success_response(id_: str | int | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def error_response(id_: str | int | None, err: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": err.to_object()}


def batch_allowed(protocol_version: str | None) -> bool:
    """MCP Streamable HTTP: a missing ``MCP-Protocol-Version`` means 2025-03-26 (MCP transports
    spec), which allowed batches; later revisions do not."""
    return protocol_version is None or protocol_version in _BATCH_REVISIONS


def rpc_error_from_gateway(exc: GatewayError) -> RpcError:
    """Map a gateway protocol error to the UCP MCP error codes (module docstring)."""
    status = exc.http_status
    data: dict[str, Any] = {"code": exc.code, "content": exc.message}
    if status in (429, 503):
        retry = exc.details.get("retry_after", 1) if isinstance(exc.details, dict) else 1
        data["retry_after"] = retry
    if exc.code in _SIGNATURE_FORMAT_CODES:
        code = INVALID_REQUEST
    elif exc.code in _DISCOVERY_CODES or status in (422, 424):
        code = UCP_DISCOVERY_ERROR
    elif status in (401, 403, 404, 409, 429, 503):
        code = UCP_PROTOCOL_ERROR
    elif status == 400:
        code = INVALID_PARAMS
    elif 400 < status < 500:  # 405, 413, 415 ...: the HTTP request itself was not acceptable
        code = INVALID_REQUEST
    elif isinstance(exc, CompanyMisconfigured):
        code = INTERNAL_ERROR
    else:
        code, data, status = INTERNAL_ERROR, {"code": "internal_error"}, 500
        return RpcError(code, "internal error", data, http_status=status)
    return RpcError(code, exc.message, data, http_status=status)


def _valid_id(value: Any) -> bool:
    # JSON-RPC: String, Number or Null; MCP forbids null request ids and fractional numbers are unwise
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse_message(obj: Any) -> Request | RpcError:
    """Validate one message object. Returns the Request, or an RpcError (-32600) whose ``data``
    holds the id when one could be read."""
    if not isinstance(obj, dict):
        return RpcError(INVALID_REQUEST, "a JSON-RPC request must be an object", http_status=400)
    has_id = "id" in obj
    id_ = obj.get("id")
    id_ok = _valid_id(id_)
    if obj.get("jsonrpc") != "2.0":
        return RpcError(INVALID_REQUEST, 'jsonrpc must be "2.0"', {"id": id_ if id_ok else None}, http_status=400)
    method = obj.get("method")
    if not isinstance(method, str) or not method:
        return RpcError(INVALID_REQUEST, "method must be a non-empty string", {"id": id_ if id_ok else None},
                        http_status=400)  # fmt: skip
    if has_id and not id_ok:
        return RpcError(INVALID_REQUEST, "id must be a string or an integer", {"id": None}, http_status=400)
    params = obj.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        return RpcError(INVALID_REQUEST, "params must be an object or an array", {"id": id_}, http_status=400)
    return Request(method, params, id_ if has_id else None, not has_id)


async def _run_one(obj: Any, methods: Mapping[str, Method], on_error: Callable[[Exception], RpcError]):
    parsed = parse_message(obj)
    if isinstance(parsed, RpcError):
        rid = parsed.data.get("id") if isinstance(parsed.data, dict) else None
        err = RpcError(parsed.code, parsed.message, http_status=parsed.http_status)
        return error_response(rid, err), err.http_status
    fn = methods.get(parsed.method)
    if fn is None:
        if parsed.notification:
            return None, 202  # unknown notifications are ignored (JSON-RPC: never answered)
        err = RpcError(METHOD_NOT_FOUND, f"method not found: {parsed.method}", http_status=200)
        return error_response(parsed.id, err), 200
    try:
        result = await fn(parsed)
    except RpcError as exc:
        return (None, 202) if parsed.notification else (error_response(parsed.id, exc), exc.http_status)
    except Exception as exc:  # the transport boundary: every failure becomes a JSON-RPC error
        err = on_error(exc)
        return (None, 202) if parsed.notification else (error_response(parsed.id, err), err.http_status)
    if parsed.notification:
        return None, 202
    return success_response(parsed.id, result), 200


def _default_on_error(exc: Exception) -> RpcError:
    if not isinstance(exc, GatewayError):
        exc = as_outage(exc) or exc  # the database went away under the call: 503, retry_after
    if isinstance(exc, GatewayError):
        return rpc_error_from_gateway(exc)
    return RpcError(INTERNAL_ERROR, "internal error", {"code": "internal_error"}, http_status=500)


def error_for(exc: Exception) -> RpcError:
    """The JSON-RPC error of an exception raised by a method handler (what :func:`handle_payload` answers)."""
    return exc if isinstance(exc, RpcError) else _default_on_error(exc)


async def handle_payload(
    body: bytes,
    methods: Mapping[str, Method],
    *,
    allow_batch: bool,
    on_error: Callable[[Exception], RpcError] = _default_on_error,
) -> Outcome:
    """Parse ``body`` and run each request through ``methods`` (name -> ``async fn(Request)``).

    A handler returns the ``result`` value or raises :class:`RpcError` / GatewayError (mapped by
    ``on_error``). Returns the :class:`Outcome`; ``body`` None means "202 Accepted, no body"
    (only notifications). Never raises.
    """
    try:
        payload = loads_strict(body)
    except InvalidJson as exc:
        err = RpcError(PARSE_ERROR, f"parse error: {exc}", http_status=400)
        return Outcome(error_response(None, err), 400)
    if isinstance(payload, list):
        if not allow_batch:
            err = RpcError(INVALID_REQUEST, "JSON-RPC batches are not supported in this protocol revision",
                           http_status=400)  # fmt: skip
            return Outcome(error_response(None, err), 400)
        if not payload:
            err = RpcError(INVALID_REQUEST, "empty batch", http_status=400)
            return Outcome(error_response(None, err), 400)
        if len(payload) > MAX_BATCH:
            err = RpcError(INVALID_REQUEST, f"a batch holds at most {MAX_BATCH} requests", http_status=400)
            return Outcome(error_response(None, err), 400)
        out = []
        for item in payload:
            resp, _ = await _run_one(item, methods, on_error)
            if resp is not None:
                out.append(resp)
            await asyncio.sleep(0)  # a handler that never awaits must not hold the event loop for the batch
        return Outcome(out or None, 200 if out else 202)
    resp, status = await _run_one(payload, methods, on_error)
    return Outcome(resp, status)

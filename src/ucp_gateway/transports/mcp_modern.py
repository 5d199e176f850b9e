"""MCP 2026-07-28 (stateless) beside the handshake revisions (pure): header and ``_meta`` checks of a
modern request, and the result fields the revision requires.

MCP 2026-07-28 basic/transports/streamable-http.mdx, basic/index.mdx, server/utilities/caching.mdx:
every POST carries ``MCP-Protocol-Version``, ``Mcp-Method`` (= ``method``) and, for ``tools/call``,
``Mcp-Name`` (= ``params.name``; values may use the ``=?base64?...?=`` sentinel, decoded with the
SDK's own :func:`mcp.shared.inbound.decode_header_value`): missing or different -> HTTP 400
``-32020``. ``params._meta["io.modelcontextprotocol/protocolVersion"]`` must equal the header and
``.../clientCapabilities`` be present: HTTP 400 ``-32602`` otherwise. Every result carries
``resultType: "complete"``; ``tools/list`` results also ``ttlMs`` and ``cacheScope`` (``private``:
the list depends on the caller's declared profile and kind).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.shared.inbound import NAME_BEARING_METHODS, decode_header_value

from .jsonrpc import INVALID_PARAMS, RpcError

__all__ = ["HEADER_MISMATCH", "MODERN_VERSIONS", "check_modern", "stamp_result"]

MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
HEADER_MISMATCH = -32020
_VERSION_META = "io.modelcontextprotocol/protocolVersion"
_CAPS_META = "io.modelcontextprotocol/clientCapabilities"
_TOOLS_TTL_MS = 300_000


def check_modern(headers: Mapping[str, str], message: Any, version: str) -> RpcError | None:
    """The refusal of one modern JSON-RPC request object, or None when it is well-formed."""
    if not isinstance(message, dict) or "id" not in message:
        return None  # notifications and malformed messages are the JSON-RPC layer's
    method = message.get("method")
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    if decode_header_value(headers.get("Mcp-Method")) != method:
        return RpcError(HEADER_MISMATCH, "Mcp-Method header missing or not the request's method", http_status=400)
    key = NAME_BEARING_METHODS.get(method) if isinstance(method, str) else None
    if key is not None and decode_header_value(headers.get("Mcp-Name")) != params.get(key):
        return RpcError(HEADER_MISMATCH, f"Mcp-Name header missing or not params.{key}", http_status=400)
    meta = params.get("_meta")
    if not isinstance(meta, dict) or meta.get(_VERSION_META) != version or not isinstance(meta.get(_CAPS_META), dict):
        return RpcError(INVALID_PARAMS, f"params._meta needs {_VERSION_META} = {version} and {_CAPS_META}",
                        http_status=400)  # fmt: skip
    return None


def stamp_result(method: str | None, body: Any) -> Any:
    """A response body with the fields 2026-07-28 requires on its result (others unchanged)."""
    if isinstance(body, dict) and isinstance(body.get("result"), dict):
        result = {"resultType": "complete", **body["result"]}  # input_required (mcp_elicit) keeps its own
        if method == "tools/list":
            result.update(ttlMs=_TOOLS_TTL_MS, cacheScope="private")
        return {**body, "result": result}
    return body

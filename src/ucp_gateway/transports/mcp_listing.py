"""What ``/ucp/mcp`` lists, to whom (pure): the UCP tools of the negotiated capabilities, the verb
tools the caller's kind may run, and the ``server/discover`` result.

- A UCP tool is listed when its capability (:func:`tool_capability`) is among the capabilities the
  caller's declared agent profile negotiates with the business (all UCP tools when no profile is
  declared): Shopify's UCP MCP filters the same way, and a tool outside the negotiated set only ever
  answers ``capabilities_incompatible``.
- A verb tool is listed when the caller's principal kind may call the verb (``VerbPolicy.principals``):
  a buyer agent is not shown the staff verbs it could only get ``role_denied`` from; staff see theirs.
- ``server/discover`` (MCP 2026-07-28, server/discover.mdx): supported versions, capabilities,
  instructions, ``ttlMs``/``cacheScope`` and the serverInfo ``_meta`` stamp; it needs no credentials.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "SERVER_INFO_META",
    "TOOL_CAPABILITIES",
    "discover_result",
    "filter_ucp_tools",
    "tool_capability",
]

SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

#: The UCP capability of each tool of the UCP MCP binding (UCP mcp.openrpc.json): tools registered
#: without one of their own (``McpTool.capability``) are filtered by this table.
TOOL_CAPABILITIES: dict[str, str] = {
    "search_catalog": "dev.ucp.shopping.catalog.search",
    "lookup_catalog": "dev.ucp.shopping.catalog.lookup",
    "get_product": "dev.ucp.shopping.catalog.lookup",
    "create_cart": "dev.ucp.shopping.cart",
    "get_cart": "dev.ucp.shopping.cart",
    "update_cart": "dev.ucp.shopping.cart",
    "cancel_cart": "dev.ucp.shopping.cart",
    "create_checkout": "dev.ucp.shopping.checkout",
    "get_checkout": "dev.ucp.shopping.checkout",
    "update_checkout": "dev.ucp.shopping.checkout",
    "complete_checkout": "dev.ucp.shopping.checkout",
    "cancel_checkout": "dev.ucp.shopping.checkout",
    "get_order": "dev.ucp.shopping.order",
}


def tool_capability(name: str, declared: str | None = None) -> str | None:
    """The capability that lists tool ``name``: its own ``declared`` one, else :data:`TOOL_CAPABILITIES`'s
    (None: not a UCP capability tool, always listed)."""
    return declared or TOOL_CAPABILITIES.get(name)


def filter_ucp_tools(
    tools: Iterable[tuple[str, str | None, dict[str, Any]]], negotiated: Iterable[str] | None
) -> list[dict[str, Any]]:
    """The definitions of ``(name, capability, definition)`` triples to list: all when ``negotiated``
    is None (no profile declared), else those whose capability is negotiated (or who have none)."""
    active = None if negotiated is None else frozenset(negotiated)
    out = []
    for name, capability, definition in tools:
        cap = tool_capability(name, capability)
        if active is None or cap is None or cap in active:
            out.append(definition)
    return out


def discover_result(
    *, supported: Iterable[str], server_version: str, instructions: str, capabilities: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``server/discover`` result (MCP 2026-07-28): public, cacheable for an hour."""
    return {
        "resultType": "complete",
        "supportedVersions": list(supported),
        "capabilities": dict(capabilities),
        "instructions": instructions,
        "ttlMs": 3_600_000,
        "cacheScope": "public",
        "_meta": {SERVER_INFO_META: {"name": "ucp-gateway", "version": server_version}},
    }

"""``ucp-gateway mcp --gateway URL``: a thin MCP stdio server (official ``mcp`` SDK) in front of a
remote gateway (solid-verbs spec/transport.md "MCP stdio").

- ``tools/list``: one tool per verb of the ``mcp_stdio`` manifest, fetched from the gateway and
  cached for 5 minutes (:class:`.remote.GatewayClient`), so new verbs appear without a release.
  Tool names use the reversible mapping of :mod:`.names` (``.`` -> ``__``) unless ``dotted``.
- ``tools/call``: forwarded to ``POST /api/v1/agent/dispatch`` with ``Verb-Surface: mcp_stdio``;
  the envelope comes back in ``structuredContent`` plus a text copy, ``isError`` when not ok.
  Consent on MCP: a write answers ``dispatch_pending``; call again with ``_confirm: true`` (and
  ``_typed_phrase`` / ``_nonce`` for typed-phrase verbs).
- Credentials: the agent key from ``UCPGW_AGENT_KEY`` / ``UCPGW_AGENT_KEY_FILE`` (+
  ``UCPGW_AGENT_PROFILE``) signs each request (RFC 9421), or a staff token from ``UCPGW_TOKEN``.
  Reads work without either; a write without credentials is refused here with ``auth_required``
  and never sent.

stdout carries only MCP messages; logs go to stderr.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from .. import __version__
from .mcp_tools import call_result, split_control, verb_tools
from .remote import GatewayClient

__all__ = ["build_server", "run_stdio"]


def _write_names(records: list[dict[str, Any]]) -> set[str]:
    return {str(r["name"]) for r in records if r.get("side_effects", "read") != "read"}


def build_server(client: GatewayClient, *, dotted: bool = False) -> Server:
    """The MCP server object (transport-agnostic; :func:`run_stdio` serves it on stdio)."""

    async def list_tools(ctx, params) -> types.ListToolsResult:
        try:
            records = await client.manifest()
        except Exception as exc:  # the gateway is down: a protocol error, not a crash
            raise MCPError(code=-32603, message=f"cannot read the verb manifest: {exc}") from None
        tools = [types.Tool.model_validate(t) for t in verb_tools(records, sanitize=not dotted)]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        body = split_control(params.name, params.arguments or {})
        verb = body["verb"]
        try:
            writes = _write_names(await client.manifest())
        except Exception:
            writes = set()
        if verb in writes and not client.authenticated:
            env = {"ok": False, "verb": verb, "error": {
                "reason": "auth_required",
                "message": "Writes need credentials: set UCPGW_AGENT_KEY (or UCPGW_AGENT_KEY_FILE) or UCPGW_TOKEN.",
            }}  # fmt: skip
        else:
            env = await client.dispatch(body)
        return types.CallToolResult.model_validate(call_result(env))

    return Server(
        "ucp-gateway",
        version=__version__,
        instructions="Verbs of a ucp-gateway company. Writes answer dispatch_pending first; call again "
        "with _confirm true (and _typed_phrase/_nonce when a phrase is required).",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def run_stdio(client: GatewayClient, *, dotted: bool = False) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin."""
    server = build_server(client, dotted=dotted)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

"""Transports that project the one verb registry onto every door (docs/transports.md).

- :mod:`.names`: reversible verb name <-> portable MCP tool name (``.`` <-> ``__``).
- :mod:`.jsonrpc`: the JSON-RPC 2.0 layer with UCP's MCP error mapping.
- :mod:`.mcp_tools`: VerbRecord -> MCP tool, envelope -> ``tools/call`` result.
- :mod:`.ucp_mcp` (+ :mod:`.ucp_tools`): the UCP MCP binding at ``/ucp/mcp``.
- :mod:`.sessions`, :mod:`.webmcp`: WebMCP cookie sessions, CSRF, routes and page script.
- :mod:`.agentkey`, :mod:`.remote`, :mod:`.auth`: agent signing key, remote gateway client,
  remote-door principals (``Verb-Surface``).
- :mod:`.mcp_stdio`, :mod:`.cli`: ``ucp-gateway mcp``, ``--gateway`` commands and shortcuts.
- :mod:`.web`: ``setup(app)`` for ``app.COMPONENTS`` (after the verbs and commerce setups).

Other packages register extra MCP tools in ``app[ucp_mcp.MCP_TOOLS]`` (name -> ``McpTool``).
"""

__all__: list[str] = []

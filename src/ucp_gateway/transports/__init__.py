"""Transports that project the one verb registry (issue 7; solid-verbs spec/transport.md).

- :mod:`.names`: reversible verb name <-> portable MCP tool name mapping.
- :mod:`.jsonrpc`: the JSON-RPC 2.0 layer with UCP's MCP error mapping.
- :mod:`.sessions`: WebMCP cookie sessions and CSRF.
"""

__all__: list[str] = []

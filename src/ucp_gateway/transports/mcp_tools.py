"""Projection of VerbRecords onto MCP tools, and of envelopes onto ``tools/call`` results (pure).

Shared by the UCP MCP endpoint (:mod:`.ucp_mcp`) and the stdio bridge (:mod:`.mcp_stdio`), so both
doors describe and answer a verb the same way (solid-verbs spec/transport.md "MCP stdio").

- Tool ``name``: :func:`.names.to_tool_name` (``.`` -> ``__``; reversible).
- ``inputSchema``: the verb's ``input_schema`` plus the optional control arguments below.
- ``outputSchema``: the envelope (solid-verbs ``schema/envelope.json`` top level).
- ``annotations``: ``readOnlyHint`` for read verbs, ``destructiveHint`` for writes.

Control fields travel as ``_``-prefixed arguments, which the dispatcher strips before validation
(digest §8 G9): ``_confirm`` (bool; ``_confirmed`` accepted), ``_typed_phrase``, ``_nonce``,
``_idempotency_key``.

A ``tools/call`` result carries the envelope in ``structuredContent`` and a JSON text copy in
``content[0]`` (UCP checkout-mcp.md); ``isError`` is true when ``ok`` is false (G9: a pending
consent is ``ok:false`` so naive agents never take it for success).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .names import NameNotPortable, from_tool_name, to_tool_name

__all__ = [
    "CONTROL_PROPERTIES",
    "ENVELOPE_SCHEMA",
    "call_result",
    "split_control",
    "verb_tool",
    "verb_tools",
]

ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "verb": {"type": "string"},
        "result": {"type": "object"},
        "error": {
            "type": "object",
            "properties": {"reason": {"type": "string"}, "message": {"type": "string"}, "hint": {"type": "string"}},
            "required": ["reason", "message"],
        },
        "audit_id": {"type": "integer"},
        "idempotency_key": {"type": "string"},
        "rollback_handle": {"type": "string"},
        "pending": {"type": "object"},
    },
    "required": ["ok", "verb"],
}
CONTROL_PROPERTIES: dict[str, Any] = {
    "_confirm": {"type": "boolean", "description": "Consent: true to run a write after reviewing it."},
    "_typed_phrase": {"type": "string", "description": "The exact phrase a typed-phrase verb asked for."},
    "_nonce": {"type": "string", "description": "The nonce returned with the phrase (pending.nonce)."},
    "_idempotency_key": {"type": "string", "description": "Replay key for writes (same key: no second run)."},
}


def verb_tool(record: Mapping[str, Any], *, sanitize: bool = True) -> dict[str, Any]:
    """One MCP ``Tool`` object for a VerbRecord. Raises NameNotPortable (see :mod:`.names`)."""
    schema = dict(record.get("input_schema") or {"type": "object"})
    schema["type"] = "object"
    props = dict(schema.get("properties") or {})
    write = record.get("side_effects", "read") != "read"
    if write:
        props.update(CONTROL_PROPERTIES)
    schema["properties"] = props
    return {
        "name": to_tool_name(str(record["name"]), sanitize=sanitize),
        "title": str(record["name"]),
        "description": str(record.get("description", "")),
        "inputSchema": schema,
        "outputSchema": ENVELOPE_SCHEMA,
        "annotations": {"readOnlyHint": not write, "destructiveHint": write, "openWorldHint": False},
    }


def verb_tools(records: Iterable[Mapping[str, Any]], *, sanitize: bool = True) -> list[dict[str, Any]]:
    """Tools for the records that have a portable name (others are left out, never renamed)."""
    out = []
    for r in records:
        try:
            out.append(verb_tool(r, sanitize=sanitize))
        except NameNotPortable:
            continue
    return out


def split_control(tool_name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """``tools/call`` params -> the dispatch body ``{verb, args, confirm, typed_phrase, nonce,
    idempotency_key}`` (control keys read from ``_``-prefixed arguments, then removed)."""
    args = dict(arguments or {})
    confirm = args.pop("_confirm", None)
    if confirm is None:
        confirm = args.pop("_confirmed", False)
    body: dict[str, Any] = {"verb": from_tool_name(tool_name), "confirm": confirm}
    for key in ("typed_phrase", "nonce", "idempotency_key"):
        v = args.pop("_" + key, None)
        if v is not None:
            body[key] = v
    body["args"] = {k: v for k, v in args.items() if not k.startswith("_")}
    return body


def call_result(payload: Mapping[str, Any], *, is_error: bool | None = None) -> dict[str, Any]:
    """A ``CallToolResult``: ``structuredContent`` + the same JSON as text; ``isError`` from ``ok``."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    err = (payload.get("ok") is False) if is_error is None else is_error
    return {"content": [{"type": "text", "text": text}], "structuredContent": dict(payload), "isError": err}

"""Reversible mapping between verb names and portable MCP tool names (solid-verbs digest §8 G5).

Verb names may contain dots (``customer.full_context``), but several MCP clients and model APIs
accept only tool names matching ``^[a-zA-Z0-9_-]{1,64}$``. The portable form replaces each ``.``
with ``__`` (two underscores)::

    customer.full_context  <->  customer__full_context
    crm_contacts_search    <->  crm_contacts_search      (unchanged)

The mapping is reversible because a mappable verb name contains neither ``__`` nor an underscore
next to a dot (``a_.b`` would map to ``a___b``, which reads back as ``a._b``); such names have no
portable form and :func:`to_tool_name` raises. Servers accept either form on
``tools/call`` (:func:`from_tool_name` turns ``__`` back into ``.``; a dotted name passes through).
Pure code.
"""

from __future__ import annotations

import re

__all__ = ["PORTABLE_TOOL_NAME", "NameNotPortable", "from_tool_name", "is_portable", "to_tool_name"]

PORTABLE_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_VERB_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_.]*$")  # solid-verbs verb-record.json name pattern


class NameNotPortable(ValueError):
    """The verb name has no portable tool name (contains ``__``, bad characters, or > 64 chars)."""


def is_portable(tool_name: str) -> bool:
    """True if ``tool_name`` matches ``^[a-zA-Z0-9_-]{1,64}$``."""
    return bool(PORTABLE_TOOL_NAME.match(tool_name))


def to_tool_name(verb_name: str, *, sanitize: bool = True) -> str:
    """The MCP tool name of a verb: ``.`` -> ``__`` when ``sanitize`` (default), else unchanged.

    Raises NameNotPortable when the verb name contains ``__`` (the mapping would not be
    reversible) or when the portable form is not ``^[a-zA-Z0-9_-]{1,64}$``.
    """
    if not _VERB_NAME.match(verb_name) or any(bad in verb_name for bad in ("__", "_.", "._")):
        raise NameNotPortable(f"verb name {verb_name!r} has no reversible tool name")
    if not sanitize:
        return verb_name
    tool = verb_name.replace(".", "__")
    if not is_portable(tool):
        raise NameNotPortable(f"tool name {tool!r} is longer than 64 characters")
    return tool


def from_tool_name(tool_name: str) -> str:
    """The verb name of a tool name: ``__`` -> ``.``. A dotted (unsanitized) name is returned as is."""
    return tool_name.replace("__", ".")

"""What the UCP MCP binding's tools are made of: :class:`McpTool` (a definition and its handler),
:class:`McpCall` (what a handler gets), the app's tool table, and the caller's profile from
``arguments.meta`` (UCP checkout-mcp.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from ..errors import BadRequest
from ..verbs.policy import Principal

__all__ = ["MCP_TOOLS", "InvalidProfileUrl", "McpCall", "McpTool", "MissingProfile", "profile_from_meta"]


class InvalidProfileUrl(BadRequest):
    code = "invalid_profile_url"


class MissingProfile(InvalidProfileUrl):
    """No ``meta["ucp-agent"].profile`` on a tool call: invalid params (HTTP 400, ``-32602``)."""


@dataclass(frozen=True, slots=True)
class McpCall:
    """What a non-verb MCP tool gets: the request, company, principal, arguments (``meta`` included)."""

    request: web.Request
    company: Any
    principal: Principal
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class McpTool:
    """A non-verb tool (UCP checkout operations): its MCP ``Tool`` definition and handler returning
    the UCP payload (put in ``structuredContent``). Handlers raise GatewayError for protocol errors.

    ``signed``: every response to a call of this tool is signed (complete_checkout: UCP
    signatures.md, as the REST binding signs every complete response). ``tools/call`` asks the
    signature layer as soon as it has the tool's name, before anything can fail (arguments, the
    caller's profile, negotiation, the idempotency key), so a refusal is signed like a success."""

    definition: dict[str, Any]
    call: Callable[[McpCall], Awaitable[Mapping[str, Any]]]
    signed: bool = False
    capability: str | None = None  # the UCP capability that lists it (None: mcp_listing's table)


MCP_TOOLS = web.AppKey("ucpgw.mcp_tools", dict)  # name -> McpTool


def profile_from_meta(arguments: Mapping[str, Any], *, allow_http: bool) -> str:
    """``arguments.meta["ucp-agent"].profile`` (UCP checkout-mcp.md). Raises InvalidProfileUrl."""
    meta = arguments.get("meta")
    agent = meta.get("ucp-agent") if isinstance(meta, Mapping) else None
    profile = agent.get("profile") if isinstance(agent, Mapping) else None
    if profile is None:
        raise MissingProfile('meta["ucp-agent"].profile is required')
    if not isinstance(profile, str) or len(profile) > 2048:
        raise InvalidProfileUrl('meta["ucp-agent"].profile must be an https URL')
    parts = urlsplit(profile)
    if parts.scheme not in (("https", "http") if allow_http else ("https",)) or not parts.hostname:
        raise InvalidProfileUrl('meta["ucp-agent"].profile must be an https URL')
    return profile

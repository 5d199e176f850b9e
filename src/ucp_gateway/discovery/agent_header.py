"""The ``UCP-Agent`` request header: an RFC 8941 Dictionary whose ``profile`` member names the caller.

UCP 2026-04-08 overview, "Platform Advertisement on Request"; signatures.md, "REST Request
Verification" steps 1-3: parse the dictionary, ``profile`` is required, its value is a quoted https
URL. MCP carries the same value in ``params.arguments.meta["ucp-agent"].profile``. Pure code, no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import http_sf

from .errors import InvalidProfileUrl
from .ssrf import MAX_URL, RefusedUrl, check_url

__all__ = ["MAX_PROFILE_URL", "AgentHeader", "agent_from_meta", "parse_ucp_agent", "validate_profile_url"]

MAX_PROFILE_URL = MAX_URL  # characters; longer URLs are refused before any fetch


@dataclass(frozen=True, slots=True)
class AgentHeader:
    """A parsed ``UCP-Agent``.

    Attributes:
        profile: the platform profile URL (https, or http for a dev allowlisted host).
        version: the non-standard ``version`` member some clients send (Jan-2026 conformance suite).
        params: the ``profile`` item's RFC 8941 parameters, as parsed.
    """

    profile: str
    version: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)


def validate_profile_url(url: str, *, http_hosts: frozenset[str] = frozenset()) -> str:
    """Check a platform profile URL and return it unchanged.

    Args:
        url: the candidate URL.
        http_hosts: lower-case host names for which plain ``http`` is accepted (dev allowlist).
    Raises:
        InvalidProfileUrl: not an absolute https URL, embedded credentials, no host, or too long
            (the outbound URL policy, :func:`.ssrf.check_url`).
    """
    return _checked_url(url, http_hosts)


@functools.lru_cache(maxsize=4096)
def _checked_url(url: str, http_hosts: frozenset[str]) -> str:
    # pure, and every request checks its (usually cached) profile URL again: memoised (refusals
    # raise and are never cached). The rules are the outbound policy's (ssrf.check_url).
    try:
        return check_url(url, dev_hosts=http_hosts, what="profile")
    except RefusedUrl as exc:
        raise InvalidProfileUrl(str(exc)) from None


def parse_ucp_agent(header: str | None, *, http_hosts: frozenset[str] = frozenset()) -> AgentHeader:
    """Parse a ``UCP-Agent`` header value (RFC 8941 §3.2 Dictionary).

    Args:
        header: the raw header value (``profile="https://platform.example/profile"``), or None.
        http_hosts: see :func:`validate_profile_url`.
    Returns: an :class:`AgentHeader`.
    Raises:
        InvalidProfileUrl: header missing or not a dictionary, ``profile`` missing or not a quoted
            string (a bare token is refused), or the URL fails :func:`validate_profile_url`.
    """
    if header is None or not header.strip():
        raise InvalidProfileUrl("UCP-Agent header is required")
    return _parse(header, http_hosts)


@functools.lru_cache(maxsize=1024)
def _parse(header: str, http_hosts: frozenset[str]) -> AgentHeader:
    # pure, and the trust middleware and negotiation both parse the same value per request: memoised
    # (refusals raise and are never cached; the result is immutable)
    try:
        parsed = http_sf.parse(header.encode("ascii"), tltype="dictionary")
    except (UnicodeEncodeError, ValueError, http_sf.StructuredFieldError) as exc:  # type: ignore[attr-defined]
        raise InvalidProfileUrl(f"UCP-Agent is not an RFC 8941 dictionary: {exc}") from None
    if not isinstance(parsed, dict) or "profile" not in parsed:
        raise InvalidProfileUrl("UCP-Agent has no profile member")
    value, params = parsed["profile"]
    if type(value) is not str:  # Token, bytes, numbers and inner lists are not quoted strings
        raise InvalidProfileUrl("UCP-Agent profile must be a quoted string")
    version = None
    if "version" in parsed:
        v = parsed["version"][0]
        version = v if type(v) is str else None
    return AgentHeader(validate_profile_url(value, http_hosts=http_hosts), version, MappingProxyType(dict(params)))


def agent_from_meta(meta: Mapping[str, Any] | None, *, http_hosts: frozenset[str] = frozenset()) -> AgentHeader:
    """The MCP form: ``meta["ucp-agent"]["profile"]`` (UCP checkout-mcp.md). Raises InvalidProfileUrl."""
    agent = (meta or {}).get("ucp-agent")
    profile = agent.get("profile") if isinstance(agent, Mapping) else None
    if not isinstance(profile, str):
        raise InvalidProfileUrl('meta["ucp-agent"].profile is required')
    version = agent.get("version") if isinstance(agent, Mapping) else None
    return AgentHeader(
        validate_profile_url(profile, http_hosts=http_hosts), version if isinstance(version, str) else None
    )

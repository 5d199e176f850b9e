"""The app's verb runtime and the app key it lives under (``app[VERBS]``).

Below the HTTP front door (``verbs.web``) and the approval pages (``verbs.pages``), which both read
it, so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .auth import Authenticator, default_authenticator
from .dispatcher import Dispatcher
from .policy import Principal
from .registry import Registry

__all__ = ["VERBS", "VerbsRuntime"]


@dataclass
class VerbsRuntime:
    """The app's verb runtime: registry (built at setup; register more before startup),
    authenticator (pluggable) and dispatcher (created at startup, when the database is open)."""

    registry: Registry
    authenticator: Authenticator = default_authenticator
    dispatcher: Dispatcher | None = None
    #: ``await admit(request, principal, company)``, called with every principal of a remote dispatch
    #: (this endpoint and the MCP generic tools) before the call runs; raises a GatewayError to
    #: refuse it. The transports install the buyer rate limit here (``commerce.web.spend_buyer_budget``).
    admit: Callable[[web.Request, Principal, Any], Awaitable[None]] | None = None
    manifest_cache: dict[Any, tuple[bytes, str]] = field(default_factory=dict)


VERBS = web.AppKey("verbs", VerbsRuntime)

"""Web wiring of the transports: one ``setup(app)`` for ``app.COMPONENTS`` (after the verbs runtime).

Routes: ``POST/GET/DELETE /ucp/mcp`` (UCP MCP binding), the WebMCP endpoints (:mod:`.webmcp`).
Path wrapper: :func:`.ucp_mcp.mcp_error_wrapper` in ``app[PATH_WRAPPERS]`` for ``/ucp/mcp``, so it runs
outside the foundation middleware (request id, error mapper) and every error on the MCP path, whoever
raised it, leaves as a JSON-RPC error; other paths pay nothing for it. No middleware of its own: the
verbs dispatch handler asks ``app[VERBS].authenticator`` (wrapped here by
:func:`.auth.remote_authenticator`, so a signed call keeps its ``Verb-Surface``) for the principal.
"""

from __future__ import annotations

from aiohttp import web

from ..appkeys import SETTINGS
from ..middleware import PATH_WRAPPERS
from ..verbs.web import VERBS
from . import webmcp
from .auth import remote_authenticator
from .ucp_mcp import MCP_PATH, MCP_TOOLS, mcp_error_wrapper, mcp_get, mcp_post
from .ucp_tools import ucp_tools

__all__ = ["setup"]


async def _admit_buyers(request: web.Request, principal, company) -> None:
    """``VerbsRuntime.admit``: a buyer principal (a signed buyer agent, an unsigned MCP caller, the
    stdio bridge's anonymous reader) spends the buyer rate limit as on the UCP bindings; staff and
    partner agents do not. Raises RateLimited (429)."""
    if principal.kind == "buyer":
        from ..commerce.web import spend_buyer_budget

        await spend_buyer_budget(request, company)


def setup(app: web.Application) -> None:
    """Add the MCP and WebMCP routes and the MCP error wrapper. Needs ``ucp_gateway.verbs.web.setup``
    to have run (``app[VERBS]``) and ``create_app``'s ``app[PATH_WRAPPERS]``."""
    settings = app[SETTINGS]
    exempt = tuple(getattr(settings, "httpsig_exempt_prefixes", ()))
    if hasattr(settings, "httpsig_exempt_prefixes") and webmcp.BASE + "/" not in exempt:
        # browsers cannot sign requests: WebMCP is authenticated by its session cookie + CSRF instead
        settings.httpsig_exempt_prefixes = (*exempt, webmcp.BASE + "/")
    webmcp.setup_routes(app)  # first: it keeps the verbs runtime's own staff-token check
    rt = app[VERBS]
    rt.authenticator = remote_authenticator(rt.authenticator, rt.registry)
    if MCP_TOOLS not in app:
        app[MCP_TOOLS] = {}
    app[MCP_TOOLS].update(ucp_tools())
    rt.admit = _admit_buyers
    app[PATH_WRAPPERS][MCP_PATH] = mcp_error_wrapper  # outermost: rewrites what the error mapper answered
    app.router.add_post(MCP_PATH, mcp_post)
    app.router.add_get(MCP_PATH, mcp_get)
    app.router.add_delete(MCP_PATH, mcp_get)

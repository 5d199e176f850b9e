"""The JSON-RPC methods of the UCP MCP binding (``/ucp/mcp``, :mod:`.ucp_mcp` is its HTTP shell),
for one HTTP request: :class:`Handlers`, and :func:`principal_for` (who calls).

Methods: ``server/discover``, ``initialize``, ``ping``, ``tools/list``, ``tools/call`` (+
``notifications/*``). The first four need no credentials, whatever the company's signature policy
(the route is an :func:`~ucp_gateway.appkeys.open_door`: a signature that is present is still
verified, and a wrong one refused). Tools are the UCP operations registered in ``app[MCP_TOOLS]``
(checkout etc., provided by the commerce package) and the verbs whose ``surfaces`` include ``ucp``,
except the verbs of the UCP binding (``VerbPolicy.binding``: checkout.*, orders.get), which no caller
can run as a generic tool: their tools are the UCP ones. ``tools/list`` shows the UCP tools of the
capabilities the declared agent profile negotiates (``UCP-Agent`` header or
``params._meta["ucp-agent"].profile``; all without one) and the verb tools the caller's kind may run
(:mod:`.mcp_listing`). Every verb call goes through the one dispatcher (same envelope and receipt as
REST).

Callers: a staff bearer token (``Authorization``) is a staff principal; otherwise the caller is a
buyer agent, identified by the RFC 9421 signature the httpsig middleware verified on this HTTP
request (``request[REQ_PRINCIPAL]``) or, when the company's signature policy lets unsigned
requests through, by ``meta["ucp-agent"].profile`` (required on every tool call; UCP N1: HTTP 400,
``-32602``). Under a policy that asks every call for a signature, an unsigned ``tools/call`` is
401 ``signature_missing``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from aiohttp import web

from .. import __version__, metrics
from ..appkeys import DATABASE, REQ_PRINCIPAL, SETTINGS
from ..commerce.context import UNVERIFIED
from ..errors import Forbidden, Unauthorized
from ..httpsig.errors import SignatureMissing
from ..httpsig.web import count_policy_refusal, effective_mode, mark_for_signing
from ..levels import ProofKind
from ..verbs.decide import Call
from ..verbs.manifest import listed, published
from ..verbs.policy import Principal, is_blocked_name
from ..verbs.web import VERBS
from . import jsonrpc
from . import mcp_elicit as elicit
from .jsonrpc import INVALID_PARAMS, Request, RpcError
from .mcp_consent import checkout_ask, declared_modes, verb_ask
from .mcp_listing import discover_result, filter_ucp_tools
from .mcp_modern import MODERN_VERSIONS
from .mcp_tooldefs import MCP_TOOLS, McpCall, McpTool, MissingProfile, profile_from_meta
from .mcp_tools import call_result, split_control, verb_tools
from .names import from_tool_name

__all__ = ["PROTOCOL_VERSIONS", "SESSION", "SURFACE", "Handlers", "principal_for"]

SESSION = web.RequestKey("ucpgw.mcp_session", str)  # the Mcp-Session-Id an initialize answers with
# handshake revisions we speak, oldest first; the last is offered when the client asks for another
PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-03-26", "2025-06-18", "2025-11-25")
SURFACE = "ucp"
_INSTRUCTIONS = (
    "UCP MCP binding of this business: shopping tools and agent verbs. "
    'Pass meta["ucp-agent"].profile in every tool call.'
)


async def principal_for(request: web.Request, company: Any) -> Principal | None:
    """Staff bearer token -> staff principal; a verified signature -> buyer principal; else None."""
    app = request.app
    auth = request.headers.get("Authorization")
    verified = request.get(REQ_PRINCIPAL)
    if auth and getattr(verified, "proof", None) == ProofKind.OAUTH and verified.authenticated:
        auth = None  # a platform's OAuth bearer token, verified by the signature layer's proofs
    if auth:
        p = await app[VERBS].authenticator(app[DATABASE].pool, company, auth, request)
        if p is None:
            raise Unauthorized("the bearer token is not valid for this company")
        return replace(p, transport=SURFACE)
    if getattr(verified, "authenticated", False) and getattr(verified, "profile_url", None):
        return Principal("buyer", company.id, "buyer", str(verified.profile_url), SURFACE)
    return None


def _negotiate(requested: Any) -> str:
    return requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]


class Handlers:
    """The JSON-RPC methods for one HTTP request."""

    def __init__(self, request: web.Request, company: Any, principal: Principal | None):
        self.request, self.company, self.principal = request, company, principal
        self.settings = request.app[SETTINGS]
        self.rt = request.app[VERBS]
        self.tools: dict[str, McpTool] = request.app.get(MCP_TOOLS, {})

    def methods(self) -> dict[str, jsonrpc.Method]:
        return {
            "server/discover": self.discover,
            "initialize": self.initialize,
            "ping": self.ping,
            "tools/list": self.tools_list,
            "tools/call": self.tools_call,
            "notifications/initialized": self.ping,
            "notifications/cancelled": self.ping,
        }

    async def initialize(self, req: Request) -> dict[str, Any]:
        params = req.params if isinstance(req.params, Mapping) else {}
        version = _negotiate(params.get("protocolVersion"))
        modes = declared_modes(params.get("capabilities"), version)
        if modes:  # the declaration travels in the session id (mcp_elicit): no state is kept here
            self.request[SESSION] = elicit.session_token(self.request.app, self.company.id, modes, version)
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "ucp-gateway", "version": __version__},
            "instructions": _INSTRUCTIONS,
        }

    async def discover(self, req: Request) -> dict[str, Any]:
        return discover_result(supported=(*MODERN_VERSIONS, *PROTOCOL_VERSIONS), server_version=__version__,
                               instructions=_INSTRUCTIONS,
                               capabilities={"tools": {"listChanged": False}})  # fmt: skip

    async def ping(self, req: Request) -> dict[str, Any]:
        return {}

    async def tools_list(self, req: Request) -> dict[str, Any]:
        # the verbs of the ucp surface this caller's kind may run (a buyer never sees staff verbs);
        # calls are still authorised at dispatch. A verb of the UCP binding (checkout.create ...) is no
        # verb tool here: the generic door refuses it (VerbPolicy.reachable); its tool is the binding's
        # own (create_checkout ...), listed when its capability is negotiated (mcp_listing)
        kind = self.principal.kind if self.principal is not None else "buyer"
        verbs = listed(self.rt.registry, surface=SURFACE, tools=True, principal_kind=kind)
        negotiated = await self._negotiated(req)
        ucp = filter_ucp_tools(((n, t.capability, t.definition) for n, t in self.tools.items()), negotiated)
        return {"tools": ucp + verb_tools(published(verbs))}

    async def _negotiated(self, req: Request) -> frozenset[str] | None:
        """The capabilities the declared agent profile negotiates (None: no profile declared). The
        profile comes from ``UCP-Agent`` or ``params._meta["ucp-agent"]`` (``params.meta`` too)."""
        params = req.params if isinstance(req.params, Mapping) else {}
        meta = next((m for m in (params.get("_meta"), params.get("meta")) if isinstance(m, Mapping)
                     and isinstance(m.get("ucp-agent"), Mapping)), None)  # fmt: skip
        header = self.request.headers.get("UCP-Agent")
        if meta is None and header is None:
            return None
        from ..commerce.context import negotiated_capabilities  # the commerce package's negotiation

        agent = None
        if meta is not None:
            from ..discovery.agent_header import agent_from_meta

            s = self.settings
            hosts = frozenset(h.lower() for h in s.dev_profile_hosts) if s.dev_mode else frozenset()
            agent = agent_from_meta(meta, http_hosts=hosts)
        return await negotiated_capabilities(self.request, self.company, agent=agent)

    def _caller(self, arguments: Mapping[str, Any]) -> Principal:
        try:
            return self._caller_of(arguments)
        except MissingProfile as exc:  # a required argument is missing: invalid params, not discovery
            raise RpcError(INVALID_PARAMS, exc.message, {"code": exc.code, "content": exc.message},
                           http_status=400) from None  # fmt: skip

    def _caller_of(self, arguments: Mapping[str, Any]) -> Principal:
        mode = effective_mode(self.company.signature_policy, self.settings.dev_mode)
        if self.principal is None and mode == "required":
            # the policy asks every call for a proof; only the discovery methods are open
            raise SignatureMissing("tools/call needs a signed request (or a platform credential)")
        if self.principal is not None:
            if self.principal.kind == "buyer":
                profile = profile_from_meta(arguments, allow_http=self.settings.dev_mode)
                if profile != self.principal.subject:  # UCP N9: the signer acts only for its own profile
                    raise Forbidden('meta["ucp-agent"].profile differs from the signing agent\'s profile')
            return self.principal
        profile = profile_from_meta(arguments, allow_http=self.settings.dev_mode)
        # unsigned: the profile is only claimed, a separate identity (commerce.context.caller_of)
        return Principal("buyer", self.company.id, "buyer", UNVERIFIED + profile, SURFACE)

    async def tools_call(self, req: Request) -> dict[str, Any]:
        params = req.params if isinstance(req.params, Mapping) else None
        name = params.get("name") if params else None
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is not None and tool.signed:  # first: every answer of this call is signed (McpTool)
            mark_for_signing(self.request)
        arguments = params.get("arguments", {}) if params else None
        if not isinstance(name, str) or not isinstance(arguments, Mapping):
            raise RpcError(INVALID_PARAMS, "tools/call needs a string name and an object arguments")
        if self.principal is None and effective_mode(self.company.signature_policy, self.settings.dev_mode) == "log":
            await count_policy_refusal(self.request, self.company, "signature_missing")  # required would refuse it
        if tool is not None:
            self.request[metrics.OPERATION] = tool.definition["name"]  # create_checkout, ...: bounded
            principal = self._caller(arguments)

            async def run(tool_name: str, args: Mapping[str, Any]) -> Mapping[str, Any]:
                return await self.tools[tool_name].call(McpCall(self.request, self.company, principal, args))

            async def resume(state: Mapping[str, Any], mode: str, answer: Any) -> dict[str, Any]:
                out = await elicit.resume_checkout(self.request, self.company.id, arguments, run, state, mode, answer)
                return call_result(out, is_error=False)

            if "requestState" in params:  # 2026-07-28: the retry of a call that asked the person
                return await self._resumed(params, principal, name, arguments, resume)
            payload = await run(name, arguments)
            merchant = self.company.display_name or self.company.slug
            ask = checkout_ask(payload, arguments, merchant) if name == "complete_checkout" else None
            if ask is not None:
                self.request[elicit.ASKED] = elicit.Asked(ask, principal.key, name, arguments, resume)
            return call_result(payload, is_error=False)
        verb = from_tool_name(name)
        if verb not in self.rt.registry and not is_blocked_name(verb):
            raise RpcError(INVALID_PARAMS, f"unknown tool: {name[:100]}")
        principal = self._caller(arguments)
        if self.rt.admit is not None:  # the buyer rate limit, as on every door (transports.web)
            await self.rt.admit(self.request, principal, self.company)
        body = split_control(name, {k: v for k, v in arguments.items() if k != "meta"})
        call = _call_from(body)

        async def dispatch(c: Call) -> Mapping[str, Any]:
            return await self.rt.dispatcher.dispatch(principal, c, company=self.company)

        async def resume_verb(state: Mapping[str, Any], mode: str, answer: Any) -> dict[str, Any]:
            return call_result(await elicit.resume_verb(call.args, dispatch, state, mode, answer))

        if "requestState" in params:
            return await self._resumed(params, principal, name, arguments, resume_verb)
        env = await dispatch(call)
        ask = verb_ask(env, call.verb, call.idempotency_key)
        if ask is not None:
            self.request[elicit.ASKED] = elicit.Asked(ask, principal.key, name, arguments, resume_verb)
        return call_result(env)

    async def _resumed(self, params: Mapping[str, Any], principal: Principal, name: str,
                       arguments: Mapping[str, Any], resume: elicit.Resume) -> dict[str, Any]:  # fmt: skip
        """A 2026-07-28 retry with ``requestState``: its question spent once, the call resumed with
        ``inputResponses.confirm`` (mcp_elicit)."""
        state = await elicit.spend_state(self.request, self.company.id, params.get("requestState"),
                                         caller=principal.key, tool=name, arguments=arguments)  # fmt: skip
        responses = params.get("inputResponses")
        answer = responses.get("confirm") if isinstance(responses, Mapping) else None
        return await resume(state, str(state.get("mode")), answer)


def _call_from(body: Mapping[str, Any]) -> Call:
    confirm = body.get("confirm", False)
    if not isinstance(confirm, bool):
        raise RpcError(INVALID_PARAMS, "_confirm must be a boolean")
    for k in ("typed_phrase", "nonce", "idempotency_key"):
        if body.get(k) is not None and not isinstance(body[k], str):
            raise RpcError(INVALID_PARAMS, f"_{k} must be a string")
    return Call(body["verb"][:200], body["args"], confirm, body.get("typed_phrase"), body.get("nonce"),
                body.get("idempotency_key"))  # fmt: skip

"""The UCP MCP binding: JSON-RPC 2.0 over Streamable HTTP at ``/ucp/mcp`` (aiohttp).

UCP checkout-mcp.md / overview "Transport Layer" and the MCP 2025-11-25 "Streamable HTTP"
transport: the client POSTs one JSON-RPC message (a batch only under 2025-03-26) and gets
``application/json`` back; notifications get 202. This server keeps no session: GET (no
standalone stream) and DELETE are 405. A call that needs the person's confirmation asks it inside
the call where the client declared elicitation (:mod:`.mcp_elicit`: a request-scoped SSE stream, or
2026-07-28's ``input_required``; the only ``Mcp-Session-Id`` is a signed copy of that declaration).

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

Errors: protocol errors become JSON-RPC ``error`` with the HTTP status as primary signal
(:func:`.jsonrpc.rpc_error_from_gateway`); errors raised before the handler (signatures, tenancy,
body size) are rewritten by :func:`mcp_error_wrapper`; business outcomes are ``result``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from .. import __version__, metrics
from ..appkeys import DATABASE, REQ_COMPANY, REQ_PRINCIPAL, SETTINGS, open_door
from ..commerce.context import UNVERIFIED
from ..errors import GatewayError, NotFound
from ..httpsig.errors import SignatureMissing
from ..httpsig.web import count_policy_refusal, effective_mode, mark_for_signing
from ..jsonbody import InvalidJson, loads_strict
from ..levels import ProofKind
from ..mediatype import json_response, json_type_problem
from ..verbs.decide import Call
from ..verbs.manifest import listed, published
from ..verbs.policy import Principal, is_blocked_name
from ..verbs.web import VERBS
from . import jsonrpc
from . import mcp_elicit as elicit
from .jsonrpc import INVALID_PARAMS, Request, RpcError
from .mcp_consent import checkout_ask, declared_modes, verb_ask
from .mcp_listing import discover_result, filter_ucp_tools
from .mcp_modern import MODERN_VERSIONS, check_modern, stamp_result
from .mcp_tooldefs import MCP_TOOLS, InvalidProfileUrl, McpCall, McpTool, MissingProfile, profile_from_meta
from .mcp_tools import call_result, split_control, verb_tools
from .names import from_tool_name

__all__ = [
    "MCP_PATH",
    "MCP_TOOLS",
    "PROTOCOL_VERSIONS",
    "InvalidProfileUrl",
    "McpCall",
    "McpTool",
    "mcp_error_wrapper",
    "mcp_get",
    "mcp_post",
    "principal_for",
    "profile_from_meta",
]

MCP_PATH = "/ucp/mcp"
_SESSION = web.RequestKey("ucpgw.mcp_session", str)  # the Mcp-Session-Id an initialize answers with
# handshake revisions we speak, oldest first; the last is offered when the client asks for another
PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-03-26", "2025-06-18", "2025-11-25")
SURFACE = "ucp"
UNSUPPORTED_PROTOCOL_VERSION = -32022  # MCP 2026-07-28: data {supported, requested}, HTTP 400
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
            raise _Unauthorized("the bearer token is not valid for this company")
        return replace(p, transport=SURFACE)
    if getattr(verified, "authenticated", False) and getattr(verified, "profile_url", None):
        return Principal("buyer", company.id, "buyer", str(verified.profile_url), SURFACE)
    return None


class _Unauthorized(GatewayError):
    code = "unauthorized"
    http_status = 401


class _Forbidden(GatewayError):
    code = "forbidden"
    http_status = 403


def _negotiate(requested: Any) -> str:
    return requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]


class _Handlers:
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
            self.request[_SESSION] = elicit.session_token(self.request.app, self.company.id, modes, version)
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
                    raise _Forbidden('meta["ucp-agent"].profile differs from the signing agent\'s profile')
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


def _origin_ok(request: web.Request) -> bool:
    """MCP transports spec: validate Origin (DNS rebinding). Absent Origin: not a browser."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    host = urlsplit(origin).netloc.lower()
    return host == request.host.lower()


def _rpc_response(outcome: jsonrpc.Outcome) -> web.Response:
    if outcome.body is None:
        return web.Response(status=202)
    # a 429 or 503 says when to come back, in the header as in error.data.retry_after
    headers = None
    if outcome.http_status in (429, 503):
        data = ((outcome.body or {}).get("error") or {}).get("data") if isinstance(outcome.body, dict) else None
        retry = data.get("retry_after") if isinstance(data, dict) else None
        headers = {"Retry-After": str(retry if isinstance(retry, int) and retry > 0 else 1)}
    return json_response(outcome.body, status=outcome.http_status, headers=headers)


@open_door
async def mcp_post(request: web.Request) -> web.Response:
    """POST /ucp/mcp: one JSON-RPC message (or a 2025-03-26 batch). Refusals before the JSON-RPC
    layer echo the request's id when the body has one (never ``id: null`` for a request)."""
    if not _origin_ok(request):
        err = RpcError(jsonrpc.UCP_PROTOCOL_ERROR, "Origin not allowed", {"code": "forbidden"}, http_status=403)
        return json_response(jsonrpc.error_response(_request_id(await request.read()), err), status=403)
    version = request.headers.get("MCP-Protocol-Version")
    if version is not None and version not in PROTOCOL_VERSIONS and version not in MODERN_VERSIONS:
        err = RpcError(UNSUPPORTED_PROTOCOL_VERSION, f"unsupported MCP-Protocol-Version {version[:40]!r}",
                       {"supported": [*PROTOCOL_VERSIONS, *MODERN_VERSIONS], "requested": version[:40]},
                       http_status=400)  # fmt: skip
        return json_response(jsonrpc.error_response(_request_id(await request.read()), err), status=400)
    company = request.get(REQ_COMPANY)
    if company is None:
        raise NotFound("this host serves no company")
    principal = await principal_for(request, company)
    body = await request.read()
    problem = json_type_problem(request) if body else None  # MCP Streamable HTTP: JSON-RPC is application/json
    if problem is not None:
        err = RpcError(jsonrpc.INVALID_REQUEST, problem, {"code": "unsupported_media_type"}, http_status=415)
        return json_response(jsonrpc.error_response(_request_id(body), err), status=415)
    handlers = _Handlers(request, company, principal)
    try:
        message = loads_strict(body)
    except InvalidJson:
        message = None
    if version in MODERN_VERSIONS:  # stateless revision: headers and _meta on every request, stamped results
        err = check_modern(request.headers, message, version)
        if err is not None:
            return json_response(jsonrpc.error_response(_request_id(body), err), status=err.http_status)
    elif elicit.is_response(message):  # the client's answer to a question we asked (mcp_elicit)
        return await elicit.answer_post(request, company.id, principal.key if principal else None, message)
    outcome = await jsonrpc.handle_payload(body, handlers.methods(), allow_batch=jsonrpc.batch_allowed(version)
                                           and version not in MODERN_VERSIONS)  # fmt: skip
    asked = await elicit.ask_person(request, company.id, version, message, jsonrpc.error_for)
    if isinstance(asked, web.StreamResponse):
        return asked
    if asked is not None:
        outcome = jsonrpc.Outcome(jsonrpc.success_response(message["id"], asked), 200)
    if version in MODERN_VERSIONS:
        method = message.get("method") if isinstance(message, dict) else None
        outcome = jsonrpc.Outcome(stamp_result(method, outcome.body), outcome.http_status)
    resp = _rpc_response(outcome)
    if _SESSION in request:
        resp.headers[elicit.SESSION_HEADER] = request[_SESSION]
    return resp


async def mcp_get(request: web.Request) -> web.Response:
    """GET/DELETE /ucp/mcp: no server-initiated stream, no sessions (MCP: 405 is allowed)."""
    raise web.HTTPMethodNotAllowed(request.method, ["POST"])


def _request_id(raw: bytes) -> str | int | None:
    try:
        obj = loads_strict(raw)
    except InvalidJson:
        return None
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


async def mcp_error_wrapper(request: web.Request, handler) -> web.StreamResponse:
    """On ``POST /ucp/mcp``: turn a REST-shaped protocol error (``{"code","content"}`` from the
    error, tenancy or signature layers) into a JSON-RPC error with the same HTTP status.

    Registered as ``app[PATH_WRAPPERS][MCP_PATH]`` (``ucp_gateway.middleware``): it runs around the
    foundation layer for this path only, so no other path pays for an extra middleware layer.
    """
    if request.method != "POST":
        return await handler(request)
    try:
        resp = await handler(request)
    except web.HTTPException as exc:
        rid = {"Request-Id": exc.headers["Request-Id"]} if "Request-Id" in exc.headers else None
        resp = json_response({"code": "invalid_request", "content": exc.reason}, status=exc.status, headers=rid)
    if resp.status < 400 or not isinstance(resp, web.Response) or not isinstance(resp.body, bytes):
        return resp
    try:
        body = json.loads(resp.body)
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and body.get("jsonrpc") == "2.0":
        return resp
    code = body.get("code") if isinstance(body, dict) and isinstance(body.get("code"), str) else "error"
    content = body.get("content") if isinstance(body, dict) and isinstance(body.get("content"), str) else ""
    exc = GatewayError(content or code, code=code)
    exc.http_status = resp.status  # type: ignore[misc]  # instance override: keep the wire status
    err = jsonrpc.rpc_error_from_gateway(exc)
    try:
        raw = await request.read()
    except (web.HTTPException, OSError, ValueError):  # body too large or already consumed
        raw = b""
    out = json_response(jsonrpc.error_response(_request_id(raw), err), status=err.http_status)
    for h in ("Retry-After", "WWW-Authenticate", "Request-Id"):
        if h in resp.headers:
            out.headers[h] = resp.headers[h]
    return out

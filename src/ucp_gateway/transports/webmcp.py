"""WebMCP: in-browser agents call verbs through the page (solid-verbs spec/transport.md "WebMCP").

Routes (on a company's host):

- ``POST /api/v1/webmcp/session``: exchange a staff bearer token for a browser session. Sets the
  session cookie (HttpOnly, Secure, SameSite=Lax, Path=/api/v1/webmcp) that binds company and user,
  and a readable CSRF cookie; answers ``{csrf_token, expires_at, role}``. ``DELETE`` logs out.
- ``GET /api/v1/webmcp/manifest?surface=dashboard|portal|developer|tenant-site|public``: the tools
  of that page: verbs whose ``surfaces`` include ``webmcp``, filtered per page (digest §8 G21:
  ``dashboard`` every class; ``portal``, ``tenant-site`` and ``developer`` READ only; ``public``
  READ verbs open to anonymous callers). Public, like the verb manifest.
- ``POST /api/v1/webmcp/execute/{tool}`` with ``{input, surface, confirm?, typed_phrase?, nonce?,
  idempotency_key?}``: needs the cookie (401 ``session_required``), the ``X-CSRF-Token`` header
  (403 ``csrf_invalid``) and a session of this host's company (403 ``session_company_mismatch``);
  runs the verb through the one dispatcher as the session's user on transport ``webmcp`` and
  answers the envelope.
- ``GET /api/v1/webmcp/webmcp.js``: the page script; it registers each tool with
  ``navigator.modelContext.registerTool()`` when the browser offers it, and asks the human for the
  typed phrase in a dialog when a verb answers ``dispatch_pending`` with one.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, SETTINGS
from ..errors import BadRequest, NotFound
from ..jsonbody import InvalidJson, loads_strict
from ..mediatype import json_response, require_json_body
from ..verbs.decide import Call
from ..verbs.manifest import listed
from ..verbs.policy import Principal, RiskClass
from ..verbs.web import VERBS
from .mcp_tools import verb_tool
from .names import NameNotPortable, from_tool_name
from .sessions import (
    COOKIE_NAME,
    CSRF_COOKIE_NAME,
    CSRF_HEADER,
    SessionRequired,
    WrongCompany,
    create_session,
    csrf_for,
    load_session,
    revoke_session,
    verify_csrf,
)

__all__ = ["BASE", "PAGES", "STAFF_AUTH", "page_verbs", "setup_routes"]

BASE = "/api/v1/webmcp"
PAGES: tuple[str, ...] = ("dashboard", "portal", "developer", "tenant-site", "public")
STAFF_AUTH = web.AppKey("ucpgw.webmcp.staff_auth", object)  # the verbs runtime's own token check


def page_verbs(registry, page: str) -> list[Any]:
    """Verbs offered on a WebMCP page (pure; see module docstring for the per-page rule)."""
    out = []
    for v in listed(registry, surface="webmcp", tools=True):  # no verb of a binding (generic door)
        read = v.policy.risk_class is RiskClass.READ
        if page == "dashboard" or (read and page in ("portal", "tenant-site", "developer")):
            out.append(v)
        elif page == "public" and read and "buyer" in v.policy.principals:
            out.append(v)
    return out


def _company(request: web.Request):
    company = request.get(REQ_COMPANY)
    if company is None:
        raise NotFound("this host serves no company")
    return company


def _page(value: Any) -> str:
    if value not in PAGES:
        raise BadRequest(f"surface must be one of {', '.join(PAGES)}")
    return str(value)


async def create(request: web.Request) -> web.Response:
    app, company = request.app, _company(request)
    principal = await app[STAFF_AUTH](app[DATABASE].pool, company, request.headers.get("Authorization"), request)
    if not isinstance(principal, Principal) or principal.kind != "staff":
        raise SessionRequired("a staff bearer token is required to open a WebMCP session")
    now = app[CLOCK].now()
    ttl = app[SETTINGS].webmcp_session_ttl
    token, session = await create_session(
        app[DATABASE].pool, company.id, subject=principal.subject, role=principal.role, now=now, ttl=ttl
    )
    csrf = csrf_for(token)
    resp = json_response({"csrf_token": csrf, "expires_at": session.expires_at.isoformat(), "role": session.role})
    resp.set_cookie(COOKIE_NAME, token, max_age=ttl, path=BASE, secure=True, httponly=True, samesite="Lax")
    resp.set_cookie(CSRF_COOKIE_NAME, csrf, max_age=ttl, path="/", secure=True, httponly=False, samesite="Lax")
    resp.headers["Cache-Control"] = "no-store"
    return resp


async def _session(request: web.Request):
    """The caller's live session, checked against CSRF and the host's company."""
    company = _company(request)
    token = request.cookies.get(COOKIE_NAME)
    session = await load_session(request.app[DATABASE].pool, token, now=request.app[CLOCK].now())
    verify_csrf(token or "", request.headers.get(CSRF_HEADER))
    if session.company_id != company.id:
        raise WrongCompany("this session belongs to another company")
    return company, session


async def delete(request: web.Request) -> web.Response:
    _, session = await _session(request)
    await revoke_session(request.app[DATABASE].pool, session, now=request.app[CLOCK].now())
    resp = web.Response(status=204)
    resp.del_cookie(COOKIE_NAME, path=BASE)
    resp.del_cookie(CSRF_COOKIE_NAME, path="/")
    return resp


async def manifest(request: web.Request) -> web.Response:
    _company(request)
    page = _page(request.query.get("surface", "dashboard"))
    tools = []
    for v in page_verbs(request.app[VERBS].registry, page):
        try:
            tools.append(verb_tool(v.record))
        except NameNotPortable:
            continue
    body = {"surface": page, "execute": BASE + "/execute/{tool}", "tools": tools}
    return json_response(body, headers={"Cache-Control": "private, max-age=60"})


def _parse_execute(raw: bytes) -> Mapping[str, Any]:
    try:
        body = loads_strict(raw or b"null")
    except InvalidJson as exc:
        raise BadRequest(str(exc)) from None
    if not isinstance(body, dict) or not isinstance(body.get("input", {}), dict):
        raise BadRequest("body must be {input: object, surface: page}")
    if not isinstance(body.get("confirm", False), bool):
        raise BadRequest("confirm must be a boolean")
    for k in ("typed_phrase", "nonce", "idempotency_key"):
        if body.get(k) is not None and not isinstance(body[k], str):
            raise BadRequest(f"{k} must be a string")
    return body


async def execute(request: web.Request) -> web.Response:
    company, session = await _session(request)
    raw = await request.read()
    require_json_body(request, raw)  # 415 otherwise, as on the REST routes
    body = _parse_execute(raw)
    page = _page(body.get("surface", "dashboard"))
    rt = request.app[VERBS]
    verb = from_tool_name(request.match_info["tool"])[:200]
    if rt.registry.get(verb) is not None and verb not in {v.name for v in page_verbs(rt.registry, page)}:
        env = {"ok": False, "verb": verb, "error": {"reason": "surface_not_allowed",
               "message": f"{verb} is not offered on the {page} page."}}  # fmt: skip
        return json_response(env)
    principal = Principal("staff", company.id, session.role, session.subject, "webmcp")
    call = Call(verb, body.get("input", {}), body.get("confirm", False), body.get("typed_phrase"),
                body.get("nonce"), body.get("idempotency_key"))  # fmt: skip
    env = await rt.dispatcher.dispatch(principal, call, company=company)
    return json_response(env, headers={"Cache-Control": "no-store"})


async def script(request: web.Request) -> web.Response:
    js = resources.files("ucp_gateway.transports").joinpath("webmcp.js").read_text("utf-8")
    return web.Response(
        text=js, content_type="application/javascript", headers={"Cache-Control": "public, max-age=300"}
    )


def setup_routes(app: web.Application) -> None:
    """Add the WebMCP routes (the verbs runtime must be set up first)."""
    app[STAFF_AUTH] = app[VERBS].authenticator
    app.router.add_post(BASE + "/session", create)
    app.router.add_delete(BASE + "/session", delete)
    app.router.add_get(BASE + "/manifest", manifest)
    app.router.add_post(BASE + "/execute/{tool}", execute)
    app.router.add_get(BASE + "/webmcp.js", script)

"""HTTP front door: the public manifest and ``POST /api/v1/agent/dispatch`` (thin adapters).

- ``GET /api/v1/agent/verbs?surface=&shape=&subagent=``: bare JSON array of VerbRecords, public,
  ``Cache-Control: public, max-age=300`` and a strong ETag (304 on If-None-Match). ``subagent`` is
  the link each company profile's ``{vendor}.{subagent}`` capability carries (its ``verb_count`` is
  the length of this list for ``surface=ucp``); an unknown value is a 400 ``invalid_arguments``.
- ``GET /api/v1/agent/verbs/{name}``: one VerbRecord.
- ``POST /api/v1/agent/dispatch`` on a company's host: ``{verb, args, confirm?, typed_phrase?, nonce?}``
  plus an optional ``Idempotency-Key`` header; answers the envelope. Denials are 200 with
  ``ok:false``; 401 when unauthenticated, 400 for a malformed body, 415 for a body that is not
  ``application/json``, 404 off a company host.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, REQ_PRINCIPAL, REQ_RAW_BODY, SETTINGS
from ..discovery.caching import etag_matches
from ..errors import GatewayError
from ..jsonbody import InvalidJson, loads_strict
from ..mediatype import UnsupportedMediaType, json_response, require_json_body
from ..tenancy import SUBAGENTS, resolve_host
from .decide import Call
from .dispatcher import Dispatcher
from .manifest import etag, listed, manifest_bytes, published
from .policy import SURFACES, Principal
from .providers import build_registry
from .registry import Registry
from .runtime import VERBS, VerbsRuntime
from .schemas import SHAPES
from .store import KEY_MAX_LENGTH, valid_key

__all__ = ["VERBS", "VerbsRuntime", "request_principal", "setup"]


def _envelope(status: int, verb: str, reason: str, message: str) -> web.Response:
    body = {"ok": False, "verb": verb, "error": {"reason": reason, "message": message}}
    return json_response(body, status=status)


async def manifest(request: web.Request) -> web.Response:
    q = request.query
    surface, shape, subagent = q.get("surface"), q.get("shape"), q.get("subagent")
    if surface is not None and surface not in SURFACES:
        return _envelope(
            400, "capability.manifest", "invalid_arguments", f"surface must be one of {', '.join(SURFACES)}"
        )
    if shape is not None and shape not in SHAPES:
        return _envelope(400, "capability.manifest", "invalid_arguments", "unknown shape")
    if subagent is not None and subagent not in SUBAGENTS:
        return _envelope(
            400, "capability.manifest", "invalid_arguments", f"subagent must be one of {', '.join(SUBAGENTS)}"
        )
    app = request.app
    reg, cache = app[VERBS].registry, app[VERBS].manifest_cache
    ck = (surface, shape, subagent, reg.version)
    if ck not in cache:
        body = manifest_bytes(published(listed(reg, surface=surface, shape=shape, subagent=subagent)))
        cache.clear() if len(cache) > 64 else None
        cache[ck] = (body, etag(body))
    body, tag = cache[ck]
    headers = {"Cache-Control": f"public, max-age={app[SETTINGS].verbs_manifest_max_age}", "ETag": tag}
    # several If-None-Match lines are one list (RFC 9110 §5.3); weak comparison and * (§13.1.2)
    if etag_matches(",".join(request.headers.getall("If-None-Match", ())), tag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, content_type="application/json", headers=headers)


async def verb_detail(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    found = [v for v in listed(request.app[VERBS].registry) if v.name == name]
    if not found:
        return _envelope(404, name[:100], "unknown_verb", f"No verb named {name!r}.")
    headers = {"Cache-Control": f"public, max-age={request.app[SETTINGS].verbs_manifest_max_age}"}
    return json_response(dict(found[0].record), headers=headers)


_CALL_FIELDS = ("verb", "args", "confirm", "typed_phrase", "nonce", "idempotency_key")


def _parse(raw: bytes, header_key: str | None) -> Call | str:
    try:
        body = loads_strict(raw or b"null")
    except InvalidJson as exc:
        return str(exc)
    if not isinstance(body, dict) or not isinstance(body.get("verb"), str) or not body["verb"]:
        return "body must be an object with a string 'verb'"
    unknown = sorted(k for k in body if k not in _CALL_FIELDS)
    if unknown:  # e.g. 'arguments' for 'args': never run a verb with defaults in place of what was meant
        return f"unknown field {unknown[0][:40]!r}; a call has {', '.join(_CALL_FIELDS)}"
    args = body.get("args", {})
    if not isinstance(args, dict):
        return "'args' must be an object"
    confirm = body.get("confirm", args.get("_confirmed", False))
    for k, typ in (("typed_phrase", str), ("nonce", str), ("idempotency_key", str)):
        if body.get(k) is not None and not isinstance(body[k], typ):
            return f"'{k}' must be a string"
    if not isinstance(confirm, bool):
        return "'confirm' must be a boolean"
    key = header_key or body.get("idempotency_key")
    if key is not None and not valid_key(key):
        return f"idempotency key must be 1-{KEY_MAX_LENGTH} printable characters"
    return Call(body["verb"][:200], args, confirm, body.get("typed_phrase"), body.get("nonce"), key)


def request_principal(found: Any, company: Any) -> Principal | None:
    """The principal an earlier middleware bound, as a verbs :class:`Principal`, or None.

    Accepts a :class:`Principal` of this company, or a *verified* signature principal (duck-typed:
    ``company_id``, ``role``, ``verified``, ``profile_url``/``kid``, as the RFC 9421 middleware
    binds): role ``buyer`` becomes a buyer principal, any other role a partner agent.
    Unverified principals are ignored (the bearer-token authenticator then decides).
    """
    if isinstance(found, Principal):
        return found if found.company_id == company.id else None
    if found is None or not getattr(found, "verified", False) or getattr(found, "company_id", None) != company.id:
        return None
    role = str(getattr(found, "role", "read_only"))
    subject = getattr(found, "profile_url", None) or getattr(found, "kid", None) or "agent"
    return Principal("buyer" if role == "buyer" else "agent", company.id, role, str(subject), "http")


async def dispatch(request: web.Request) -> web.Response:
    app = request.app
    pool = app[DATABASE].pool
    company = request.get(REQ_COMPANY) if REQ_COMPANY in request else await resolve_host(pool, request.host)
    if company is None:
        return _envelope(404, "?", "company_not_found", "This host serves no company.")
    principal = request_principal(request.get(REQ_PRINCIPAL), company)
    if principal is None:
        principal = await app[VERBS].authenticator(pool, company, request.headers.get("Authorization"), request)
    if principal is None:
        resp = _envelope(401, "?", "auth_required", "Authenticate with a staff token (Authorization: Bearer ...).")
        resp.headers["WWW-Authenticate"] = "Bearer"
        return resp
    if app[VERBS].admit is not None:
        try:
            await app[VERBS].admit(request, principal, company)
        except GatewayError as exc:
            resp = _envelope(exc.http_status, "?", exc.code, exc.message)
            if "retry_after" in exc.details:
                resp.headers["Retry-After"] = str(exc.details["retry_after"])
            return resp
    raw = request[REQ_RAW_BODY] if REQ_RAW_BODY in request else await request.read()
    try:
        require_json_body(request, raw)
    except UnsupportedMediaType as exc:
        return _envelope(exc.http_status, "?", exc.code, exc.message)
    call = _parse(raw, request.headers.get("Idempotency-Key"))
    if isinstance(call, str):
        return _envelope(400, "?", "invalid_request", call)
    dispatcher = app[VERBS].dispatcher
    assert dispatcher is not None, "verbs runtime not started"
    env = await dispatcher.dispatch(principal, call, company=company)
    return json_response(env)


async def _runtime(app: web.Application) -> AsyncIterator[None]:
    rt = app[VERBS]
    rt.dispatcher = Dispatcher(rt.registry, app[DATABASE].pool, app[SETTINGS], app[CLOCK] if CLOCK in app else None)
    yield
    rt.dispatcher = None


def setup(app: web.Application, registry: Registry | None = None) -> None:
    """Add the verb routes and the runtime's startup to ``app`` (needs SETTINGS and DATABASE by
    startup; CLOCK optional). ``app[VERBS]`` holds the registry (other components may register
    verbs on it before startup) and the pluggable authenticator."""
    app[VERBS] = VerbsRuntime(registry if registry is not None else build_registry())
    app.router.add_get("/api/v1/agent/verbs", manifest)
    app.router.add_get("/api/v1/agent/verbs/{name}", verb_detail)
    app.router.add_post("/api/v1/agent/dispatch", dispatch)
    from .pages import setup_pages

    setup_pages(app)  # the approval pages of human-only verbs (the human channel)
    app.cleanup_ctx.append(_runtime)

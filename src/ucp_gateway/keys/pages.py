"""The company admin's pages: sign in with a staff token, then the company's signing keys.

::

    GET  /admin/                         -> /admin/keys
    GET  /admin/sign-in                  the sign-in form (a staff API token, type password)
    POST /admin/sign-in                  opens a session (cookie ucpgw_staff), 303 to ?next= or /admin/keys
    POST /admin/sign-out                 ends it
    GET  /admin/keys                     read_only  keys with state and timeline, key events (audit trail)
    POST /admin/keys/rotate              admin      new pending key (the scheduler activates it)
    POST /admin/keys/{kid}/activate      admin      pending -> active now (after publish_min)
    POST /admin/keys/{kid}/schedule      admin      when the scheduler activates a pending key (UTC), or clear
    POST /admin/keys/{kid}/retire        admin      pending/rotating -> retired
    POST /admin/keys/{kid}/compromise    owner      typed confirmation "COMPROMISE <first 8 of kid>"
    GET  /admin/tokens                   admin      staff tokens: role, label, state (never the token)
    POST /admin/tokens/{id}/revoke       owner, or the token's own session

Every action goes through the same repository functions as ``/admin/v1/keys`` and the CLI
(:mod:`.repository`), with the session's token as the actor. POSTs need the session's CSRF token and
a same-origin request (:func:`ucp_gateway.htmlpage.same_origin`); every page answers with the
private-page headers. No page shows private key material or a token: keys are their public kid.
:func:`staff_page` is the decorator the other subsystems' staff pages use (verbs: approvals).
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, SETTINGS, human_page
from ..clock import SystemClock
from ..errors import GatewayError
from ..htmlpage import PAGE_HEADERS, clear_cookie, new_token, page, same_origin, set_cookie, setup_assets, tokens_equal
from ..tenancy import Company, resolve_host
from .admin_tokens import AdminAuthError, authenticate_admin, list_admin_tokens, revoke_admin_token, role_at_least
from .lifecycle import PUBLISHED, KeyState, KeyTiming
from .repository import apply_event, compromise_key, list_key_events, list_keys, rotate, schedule_activation
from .sessions import COOKIE, COOKIE_PATH, StaffSession, end_session, open_session, session_of

__all__ = ["compromise_phrase", "setup_pages", "staff_page"]

_LOGIN_COOKIE = "ucpgw_login"
_CSRF_FAILED = "The form's security check failed: reload the page."
StaffHandler = Callable[[web.Request, Company, StaffSession], Awaitable[web.StreamResponse]]


_NOTICES = {
    "rotated": "A new key is pending: it is published now and activates at the time shown.",
    "compromised": "The key is marked compromised: it is no longer published and never signs again.",
    "activate": "The key is active: it signs from now on; the previous one verifies only.",
    "retire": "The key is retired: it is no longer published.",
    "scheduled": "The activation is scheduled: the key scheduler activates the key at the time shown.",
}


def _now(request: web.Request) -> dt.datetime:
    return (request.app.get(CLOCK) or SystemClock()).now()


def compromise_phrase(kid: str) -> str:
    """What the admin types to mark ``kid`` compromised."""
    return f"COMPROMISE {kid[:8]}"


def _message(title: str, *lines: str, status: int, site: str = "Staff", back: str | None = None) -> web.Response:
    extra = {"back_url": back, "back_text": "Back"} if back else {}
    return page("message.html", status=status, site=site, title=title, lines=list(lines), home_url="/admin/", **extra)


async def _company(request: web.Request) -> Company | None:
    if REQ_COMPANY in request:
        return request[REQ_COMPANY]
    return await resolve_host(request.app[DATABASE].pool, request.host)


def staff_page(floor: str) -> Callable[[StaffHandler], Callable[[web.Request], Awaitable[web.StreamResponse]]]:
    """A staff page handler: the Host's company, a live session of it (a GET without one is sent to
    the sign-in page; a POST is 403), the role floor (403 page), and for POSTs a same-origin request
    with the session's CSRF token in the form field ``csrf_token`` (403 page)."""

    def wrap(fn: StaffHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        @human_page
        @functools.wraps(fn)
        async def handler(request: web.Request) -> web.StreamResponse:
            company = await _company(request)
            if company is None:
                return _message("Not found", "No company is served on this host.", status=404)
            session = await session_of(
                request.app[DATABASE].pool, company.id, request.cookies.get(COOKIE), now=_now(request)
            )
            site = company.display_name or company.slug
            if session is None:
                if request.method == "GET":
                    raise web.HTTPSeeOther(f"/admin/sign-in?next={quote(request.path_qs, safe='')}")
                return _message("Signed out", "Your session has ended: sign in again.", status=403, site=site)
            if request.method == "POST":
                form = await request.post()
                if not same_origin(request) or not tokens_equal(str(form.get("csrf_token") or ""), session.csrf):
                    return _message(
                        "Refused", "The form's security check failed: reload the page.", status=403, site=site
                    )
            if not role_at_least(session.role, floor):
                return _message("Not allowed", f"This needs the {floor} role.", status=403, site=site)
            return await fn(request, company, session)

        return handler

    return wrap


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={**PAGE_HEADERS, "Location": location})


def _site(company: Company) -> str:
    return company.display_name or company.slug


def _next(value: str | None) -> str:
    # only a path of these pages: never an open redirect
    if value and value.startswith("/admin/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/admin/keys"


@human_page
async def sign_in_form(request: web.Request) -> web.Response:
    company = await _company(request)
    if company is None:
        return _message("Not found", "No company is served on this host.", status=404)
    login = request.cookies.get(_LOGIN_COOKIE) or new_token()
    resp = page(
        "admin_signin.html",
        site=_site(company),
        title="Staff sign-in",
        home_url="/admin/",
        csrf=login,
        next=_next(request.query.get("next")),
        problem=None,
        signed_in=False,
    )
    set_cookie(resp, _LOGIN_COOKIE, login, path=COOKIE_PATH, max_age=600)
    return resp


@human_page
async def sign_in(request: web.Request) -> web.StreamResponse:
    company = await _company(request)
    if company is None:
        return _message("Not found", "No company is served on this host.", status=404)
    form = await request.post()
    if not same_origin(request) or not tokens_equal(
        str(form.get("csrf_token") or ""), request.cookies.get(_LOGIN_COOKIE)
    ):
        return _message(
            "Refused", "The form's security check failed: reload the page.", status=403, site=_site(company)
        )
    token = str(form.get("token") or "").strip()
    try:
        staff = await authenticate_admin(request.app[DATABASE].pool, f"Bearer {token}")
        if staff.company_id != company.id:
            raise AdminAuthError("a valid admin bearer token is required")
    except AdminAuthError:
        resp = page(
            "admin_signin.html",
            status=401,
            site=_site(company),
            title="Staff sign-in",
            home_url="/admin/",
            csrf=request.cookies.get(_LOGIN_COOKIE),
            next=_next(str(form.get("next") or "")),
            problem="That token does not sign in to this company.",
            signed_in=False,
        )
        return resp
    value, _ = await open_session(
        request.app[DATABASE].pool, staff, now=_now(request), ttl=request.app[SETTINGS].staff_session_ttl
    )
    resp = _see_other(_next(str(form.get("next") or "")))
    set_cookie(resp, COOKIE, value, path=COOKIE_PATH, max_age=request.app[SETTINGS].staff_session_ttl)
    clear_cookie(resp, _LOGIN_COOKIE, path=COOKIE_PATH)
    return resp


@staff_page("read_only")
async def sign_out(request: web.Request, company: Company, session: StaffSession) -> web.StreamResponse:
    await end_session(request.app[DATABASE].pool, session, now=_now(request))
    resp = _see_other("/admin/sign-in")
    clear_cookie(resp, COOKIE, path=COOKIE_PATH)
    return resp


@human_page
async def admin_home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/admin/keys")


def _when(t: dt.datetime | None) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if t else ""


@staff_page("read_only")
async def keys_page(request: web.Request, company: Company, session: StaffSession) -> web.Response:
    pool, settings = request.app[DATABASE].pool, request.app[SETTINGS]
    keys, events = await list_keys(pool, company.id), await list_key_events(pool, company.id)
    publish_min = settings.keys_publish_min
    rows = []
    for k in keys:
        timing = KeyTiming(k.kid, k.state, k.state_changed_at, k.activate_at)
        due = timing.activation_due(publish_min) if k.state is KeyState.PENDING else None
        earliest = max(_now(request), k.state_changed_at + dt.timedelta(seconds=publish_min))
        rows.append(
            {
                "kid": k.kid,
                "state": k.state.value,
                "published": k.state in PUBLISHED,
                "created": _when(k.created_at),
                "changed": _when(k.state_changed_at),
                "activates_at": _when(due) if due else "",
                "can_activate": due is not None
                and k.state_changed_at + dt.timedelta(seconds=publish_min) <= _now(request),
                "scheduled": k.activate_at is not None,
                "earliest": _when(earliest),
                "at_value": (due or earliest).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M"),
                "can_retire": k.state in (KeyState.PENDING, KeyState.ROTATING),
                "can_compromise": k.state is not KeyState.COMPROMISED,
                "phrase": compromise_phrase(k.kid),
            }
        )
    notice = _NOTICES.get(request.query.get("done", ""), (request.query.get("done") and "Done.") or None)
    return page(
        "admin_keys.html",
        site=_site(company),
        title="Signing keys",
        home_url="/admin/",
        csrf=session.csrf,
        role=session.role,
        keys=rows,
        events=[{**e, "at": _when(e["at"]) if isinstance(e.get("at"), dt.datetime) else e.get("at")} for e in events],
        notice=notice,
        problem=request.query.get("problem"),
        can_admin=role_at_least(session.role, "admin"),
        can_owner=role_at_least(session.role, "owner"),
        signed_in=True,
    )


def _back(done: str = "", problem: str = "") -> web.HTTPSeeOther:
    q = f"?done={quote(done)}" if done else f"?problem={quote(problem)}" if problem else ""
    return web.HTTPSeeOther("/admin/keys" + q)


@staff_page("admin")
async def rotate_action(request: web.Request, company: Company, session: StaffSession) -> web.StreamResponse:
    await rotate(
        request.app[DATABASE].pool, company.id, actor=session.actor, reason="rotate (admin page)", now=_now(request)
    )
    raise _back("rotated")


def _event_action(event: str):
    @staff_page("admin")
    async def handler(request: web.Request, company: Company, session: StaffSession) -> web.StreamResponse:
        extra = {"publish_min": request.app[SETTINGS].keys_publish_min} if event == "activate" else {}
        try:
            await apply_event(
                request.app[DATABASE].pool,
                company.id,
                request.match_info["kid"],
                event,
                actor=session.actor,
                reason=f"{event} (admin page)",
                now=_now(request),
                **extra,
            )
        except GatewayError as exc:
            raise _back(problem=exc.message) from None
        raise _back(event)

    return handler


@staff_page("admin")
async def schedule_action(request: web.Request, company: Company, session: StaffSession) -> web.StreamResponse:
    """The form's ``activate_at`` (``datetime-local``, read as UTC), or ``clear=yes``: the same
    :func:`.repository.schedule_activation` as the admin API and ``ucp-gateway keys schedule``."""
    form = await request.post()
    at = None
    if form.get("clear") != "yes":
        try:
            at = dt.datetime.strptime(str(form.get("activate_at") or ""), "%Y-%m-%dT%H:%M").replace(tzinfo=dt.UTC)
        except ValueError:
            raise _back(problem="Not scheduled: give the date and time (UTC).") from None
    try:
        await schedule_activation(
            request.app[DATABASE].pool, company.id, request.match_info["kid"], at, actor=session.actor,
            now=_now(request), publish_min=request.app[SETTINGS].keys_publish_min,
        )  # fmt: skip
    except GatewayError as exc:
        raise _back(problem=f"Not scheduled: {exc.message}") from None
    raise _back("scheduled")


@staff_page("owner")
async def compromise_action(request: web.Request, company: Company, session: StaffSession) -> web.StreamResponse:
    kid = request.match_info["kid"]
    form = await request.post()
    if str(form.get("typed_phrase") or "").strip() != compromise_phrase(kid):
        raise _back(problem=f'Not marked: type exactly "{compromise_phrase(kid)}".')
    try:
        await compromise_key(
            request.app[DATABASE].pool,
            company.id,
            kid,
            actor=session.actor,
            reason="compromised (admin page)",
            now=_now(request),
        )
    except GatewayError as exc:
        raise _back(problem=exc.message) from None
    raise _back("compromised")


@staff_page("admin")
async def tokens_page(request: web.Request, company: Company, session: StaffSession) -> web.Response:
    tokens = await list_admin_tokens(request.app[DATABASE].pool, company.id, now=_now(request))
    return page(
        "admin_tokens.html",
        site=_site(company),
        title="Staff tokens",
        home_url="/admin/",
        csrf=session.csrf,
        signed_in=True,
        tokens=tokens,
        me=str(session.token_id),
        can_owner=role_at_least(session.role, "owner"),
        notice="Token revoked: it and its sessions open nothing any more." if request.query.get("done") else None,
    )


@staff_page("read_only")
async def revoke_token_action(request: web.Request, company: Company, session: StaffSession) -> web.StreamResponse:
    """The admin API's rule (keys/web.py tokens_revoke_handler): an owner revokes any token of the
    company, anyone their own."""
    tid = request.match_info["token_id"]
    pool, now = request.app[DATABASE].pool, _now(request)
    if tid != str(session.token_id) and not role_at_least(session.role, "owner"):
        return _message("Not allowed", "Revoking another token needs the owner role.", status=403, site=_site(company))
    try:
        uid = uuid.UUID(tid)
    except ValueError:
        uid = None
    if uid is None or not any(t["token_id"] == str(uid) for t in await list_admin_tokens(pool, company.id, now=now)):
        return _message("Not found", "No such token.", status=404, site=_site(company))
    await revoke_admin_token(pool, company.id, uid, now=now)
    return _see_other("/admin/tokens?done=revoked")


def setup_pages(app: web.Application) -> None:
    """Add the admin pages' routes and the stylesheet."""
    setup_assets(app)
    app.router.add_get("/admin/", admin_home)
    app.router.add_get("/admin/sign-in", sign_in_form)
    app.router.add_post("/admin/sign-in", sign_in)
    app.router.add_post("/admin/sign-out", sign_out)
    app.router.add_get("/admin/keys", keys_page)
    app.router.add_post("/admin/keys/rotate", rotate_action)
    app.router.add_post("/admin/keys/{kid}/activate", _event_action("activate"))
    app.router.add_post("/admin/keys/{kid}/retire", _event_action("retire"))
    app.router.add_post("/admin/keys/{kid}/schedule", schedule_action)
    app.router.add_post("/admin/keys/{kid}/compromise", compromise_action)
    app.router.add_get("/admin/tokens", tokens_page)
    app.router.add_post("/admin/tokens/{token_id}/revoke", revoke_token_action)

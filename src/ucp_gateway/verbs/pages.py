"""The human channel's pages: a signed-in person confirms a human-only verb (verbs/approvals.py).

::

    GET  /admin/approvals          the open approvals of the company
    GET  /admin/approvals/{id}     what was asked (verb, arguments, who, through which door), the
                                   phrase to type; the form (typed phrase, the nonce of a preflight
                                   run as this person, CSRF token)
    POST /admin/approvals/{id}     confirm: the verb runs once, as this person on the human channel
                                   (idempotency key = the approval's id), and the approval closes
    POST /admin/approvals/{id}/decline

The person must be signed in (keys/pages.py ``staff_page``) with the role the verb's class needs
(``CLASS_FLOOR``), with a credential other than the one that asked: the bearer token that asked can
open a session of its own, so its session is the same caller, never a second person. The typed
phrase keeps its HMAC nonce (single use, ``verbs_nonce_ttl``); the approval row is locked while the
verb runs, so two people confirming at once run it once.
"""

from __future__ import annotations

import datetime as dt
import json

from aiohttp import web

from ..appkeys import CLOCK, DATABASE
from ..clock import SystemClock
from ..db import tenant_tx
from ..htmlpage import page
from ..keys.pages import staff_page
from ..keys.sessions import StaffSession
from ..tenancy import Company
from . import approvals
from .decide import Call
from .policy import CLASS_FLOOR, Principal, RiskClass, role_at_least
from .runtime import VERBS

__all__ = ["setup_pages"]


def _now(request: web.Request) -> dt.datetime:
    return (request.app.get(CLOCK) or SystemClock()).now()


def _person(company: Company, session: StaffSession) -> Principal:
    """The signed-in person as a verb principal on the human channel."""
    return Principal("staff", company.id, session.role, session.actor, "http", human=True)


def _dispatcher(request: web.Request):
    d = request.app[VERBS].dispatcher
    assert d is not None, "verbs runtime not started"
    return d


def _view(company: Company, session: StaffSession, a: approvals.Approval, now: dt.datetime, **extra) -> dict:
    floor = CLASS_FLOOR.get(RiskClass[a.risk_class], "owner") if a.risk_class in RiskClass.__members__ else "owner"
    own = a.requested_by == _person(company, session).key
    return {
        "site": company.display_name or company.slug,
        "title": "Approve a request",
        "home_url": "/admin/",
        "signed_in": True,
        "csrf": session.csrf,
        "a": a,
        "args_json": json.dumps(a.args, indent=2, sort_keys=True, ensure_ascii=False),
        "is_open": a.open(now),
        "own": own,
        "allowed": role_at_least(session.role, floor),
        "floor": floor,
        "form": None,
        "problem": None,
        "result": None,
        **extra,
    }


async def _form(request: web.Request, company: Company, session: StaffSession, a: approvals.Approval) -> dict | None:
    """A preflight as this person: the phrase and a nonce bound to them (None: nothing to confirm)."""
    env = await _dispatcher(request).dispatch(_person(company, session), Call(a.verb, a.args), company=company)
    pending = env.get("pending") or {}
    if env.get("error", {}).get("reason") != "dispatch_pending" or "nonce" not in pending:
        return None
    return {"nonce": pending["nonce"], "phrase": pending["required_phrase"], "expires_at": pending["expires_at"]}


@staff_page("read_only")
async def list_page(request: web.Request, company: Company, session: StaffSession) -> web.Response:
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        items = await approvals.list_open_approvals(conn, _now(request))
    return page(
        "admin_approvals.html",
        site=company.display_name or company.slug,
        title="Approvals",
        home_url="/admin/",
        signed_in=True,
        csrf=session.csrf,
        items=items,
    )


@staff_page("read_only")
async def approval_page(request: web.Request, company: Company, session: StaffSession) -> web.Response:
    now = _now(request)
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        a = await approvals.get_approval(conn, request.match_info["id"])
    if a is None:
        return page("message.html", status=404, site=company.slug, title="Not found", lines=["No such approval."])
    view = _view(company, session, a, now)
    if view["is_open"] and view["allowed"] and not view["own"]:
        view["form"] = await _form(request, company, session, a)
    return page("admin_approval.html", **view)


@staff_page("read_only")
async def confirm(request: web.Request, company: Company, session: StaffSession) -> web.Response:
    now, form = _now(request), await request.post()
    typed, nonce = str(form.get("typed_phrase") or ""), str(form.get("nonce") or "")
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        a = await approvals.get_approval(conn, request.match_info["id"], for_update=True)
        if a is None:
            return page("message.html", status=404, site=company.slug, title="Not found", lines=["No such approval."])
        view = _view(company, session, a, now)
        if not view["is_open"] or view["own"] or not view["allowed"]:
            return page("admin_approval.html", status=409 if not view["is_open"] else 403, **view)
        call = Call(a.verb, a.args, True, typed, nonce, a.id)
        env = await _dispatcher(request).dispatch(_person(company, session), call, company=company)
        if env.get("ok"):
            await approvals.finish_approval(
                conn, a.id, status="executed", by=session.actor, now=now, audit_id=env["audit_id"]
            )
            a = await approvals.get_approval(conn, a.id)
            assert a is not None
            return page("admin_approval.html", **_view(company, session, a, now, result=env))
    err = env.get("error") or {}
    view["problem"] = f"{err.get('message', 'Not run.')} {err.get('hint', '')}".strip()
    view["form"] = await _form(request, company, session, a)
    return page("admin_approval.html", status=409, **view)


@staff_page("read_only")
async def decline(request: web.Request, company: Company, session: StaffSession) -> web.StreamResponse:
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        a = await approvals.get_approval(conn, request.match_info["id"], for_update=True)
        if a is not None and role_at_least(session.role, _view(company, session, a, _now(request))["floor"]):
            await approvals.finish_approval(conn, a.id, status="declined", by=session.actor, now=_now(request))
    raise web.HTTPSeeOther("/admin/approvals")


def setup_pages(app: web.Application) -> None:
    """Add the approval pages (the staff sign-in is the keys subsystem's)."""
    app.router.add_get("/admin/approvals", list_page)
    app.router.add_get("/admin/approvals/{id}", approval_page)
    app.router.add_post("/admin/approvals/{id}", confirm)
    app.router.add_post("/admin/approvals/{id}/decline", decline)

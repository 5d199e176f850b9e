"""The company admin's page of platform credentials: the partners' API keys, OAuth clients, Web Bot
Auth directories and mTLS certificates, listed and revoked in the browser.

::

    GET  /admin/credentials              read_only  every credential: id, kind, partner, label, state
    POST /admin/credentials/{id}/revoke  admin      revoked at once (an OAuth client's tokens with it)

The same functions as ``/admin/v1/partners/credentials`` and ``ucp-gateway partners credentials``
(:mod:`.credentials`), with the staff session (:func:`ucp_gateway.keys.pages.staff_page`: CSRF,
same-origin, role floor). No secret is ever on the page: a secret is shown once, by the CLI or the
admin API that creates it, and only its hash is stored.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from ..appkeys import CLOCK, DATABASE
from ..clock import SystemClock
from ..errors import NotFound
from ..htmlpage import PAGE_HEADERS, page
from ..keys.admin_tokens import role_at_least
from ..keys.pages import staff_page
from ..keys.sessions import StaffSession
from ..logs import get_logger
from ..tenancy import Company
from .credentials import list_credentials, revoke_credential

__all__ = ["setup_pages"]

_log = get_logger("ucp_gateway.access.pages")


def _when(t: dt.datetime | None) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if t else ""


@staff_page("read_only")
async def credentials_page(request: web.Request, company: Company, session: StaffSession) -> web.Response:
    creds = await list_credentials(request.app[DATABASE].pool, company.id)
    rows = [
        {**c.to_json(), "state": "revoked" if c.revoked_at else "live", "created": _when(c.created_at),
         "revoked": _when(c.revoked_at), "methods": ", ".join(c.to_json()["auth_methods"])}
        for c in reversed(creds)
    ]  # fmt: skip
    done = request.query.get("done")
    return page(
        "admin_credentials.html",
        site=company.display_name or company.slug,
        title="Platform credentials",
        home_url="/admin/",
        csrf=session.csrf,
        signed_in=True,
        credentials=rows,
        can_admin=role_at_least(session.role, "admin"),
        notice=f"Credential {done[:40]} revoked: it proves nothing any more." if done else None,
    )


@staff_page("admin")
async def revoke_action(request: web.Request, company: Company, session: StaffSession) -> web.StreamResponse:
    cid = request.match_info["cred_id"]
    now = (request.app.get(CLOCK) or SystemClock()).now()
    try:
        cred = await revoke_credential(request.app[DATABASE].pool, company.id, cid[:100], now=now)
    except NotFound:
        return page("message.html", status=404, site=company.display_name or company.slug, title="Not found",
                    lines=["No such credential."], home_url="/admin/", back_url="/admin/credentials",
                    back_text="Back")  # fmt: skip
    _log.info("platform_credential_revoked", company_id=str(company.id), id=cred.id, actor=session.actor)
    return web.Response(status=303, headers={**PAGE_HEADERS, "Location": f"/admin/credentials?done={cred.id}"})


def setup_pages(app: web.Application) -> None:
    """Add the credentials page's routes (the staff pages' stylesheet is the keys pages')."""
    app.router.add_get("/admin/credentials", credentials_page)
    app.router.add_post("/admin/credentials/{cred_id}/revoke", revoke_action)

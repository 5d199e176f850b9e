"""The shop's buyer-facing web pages: the URLs that UCP responses hand to people.

- ``GET /``: the shop's home page with its products (the ``continue_url`` of ``not_found`` envelopes;
  :mod:`.catalog_pages` renders it, with the product and cart pages and ``/llms.txt``);
- ``GET /terms`` and ``GET /privacy``: the checkout's ``links[]`` (``terms_of_service``,
  ``privacy_policy``), with the text in the company's ``settings.commerce.pages`` (``terms``, ``privacy``);
- ``GET /checkout-sessions/{id}``: the checkout's ``continue_url`` (UCP checkout.md: "an opaque
  server-side URL such as https://shop/checkout-sessions/{id}"), where a person picks up a session:
  what they agree to (items, prices, fulfillment, totals, merchant, terms links) and what needs
  them (the escalation messages). Where the page resolves an escalation (:mod:`.confirm`), it shows
  the confirmation form, posted to
- ``POST /checkout-sessions/{id}/confirm``: spends the form's single-use confirmation token (CSRF
  token in the form and in the cookie), records the confirmation for the checkout as shown, and
  recomputes its status; then 303 back to the page. The agent sees the new status on its next call.
- ``GET /orders/{id}``: the order's ``permalink_url``.

They are pages for people, so the signature layer asks no RFC 9421 signature of them
(:func:`ucp_gateway.appkeys.human_page`). The session and order ids are unguessable (122 random
bits), so these pages work as capability URLs, and they show nothing personal: items, quantities,
prices, fulfillment option, totals and status. They leave out buyer, addresses and payment. Every
page answers with the headers of :data:`ucp_gateway.htmlpage.PAGE_HEADERS` (``no-store``,
``no-referrer``, a CSP without scripts). The views are pure (:func:`checkout_view`, ...), the
templates escape every value; the handlers run inside a tenant transaction (RLS).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, SETTINGS, human_page
from ..company_settings import setting, text
from ..db import tenant_tx
from ..errors import GatewayError
from ..htmlpage import (
    PAGE_HEADERS,
    format_money,
    new_token,
    page,
    render,
    same_origin,
    set_cookie,
    setup_assets,
    tokens_equal,
)
from ..tenancy import Company
from . import confirm, page_pay, repo
from .checkout import rfc3339
from .context import company_of
from .orders import order_from_rows
from .status import TERMINAL

__all__ = [
    "CSRF_COOKIE",
    "checkout_view",
    "format_money",
    "render_checkout_page",
    "render_home_page",
    "render_order_page",
    "render_policy_page",
    "setup_pages",
]

CSRF_COOKIE = "ucpgw_csrf"
_COOKIE_PATH = "/checkout-sessions/"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")
_POLICIES = {"terms": "Terms of service", "privacy": "Privacy policy"}
_LINK_TITLES = {"terms_of_service": "Terms of service", "privacy_policy": "Privacy policy"}
_STATUS_TEXT = {
    "incomplete": "Your agent is still putting this checkout together. Go back to it to finish.",
    "requires_escalation": "This checkout needs your input before it can be completed.",
    "ready_for_complete": "This checkout is ready to pay. Go back to your agent to confirm it.",
    "complete_in_progress": "Payment for this checkout is being processed.",
    "completed": "This checkout is complete.",
    "canceled": "This checkout was canceled.",
}


def render_home_page(shop: str, products: Iterable[Mapping[str, Any]]) -> str:
    """The home page: ``products`` are ``{id, title, price (minor units), currency}`` mappings."""
    return render("shop_home.html", site=shop, title=shop, products=list(products))


def render_policy_page(shop: str, kind: str, text: str | None) -> str:
    """A policy page (``kind`` ``terms`` or ``privacy``); ``text`` is plain text, paragraphs split
    on blank lines; None says that the shop has not published one."""
    paras = [p.strip() for p in (text or "").split("\n\n") if p.strip()]
    return render("shop_policy.html", site=shop, title=_POLICIES[kind], paragraphs=paras)


def _line_total(li: Mapping[str, Any]) -> int:
    return next((t["amount"] for t in li.get("totals") or [] if t["type"] == "total"), 0)


def _fulfillment(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The selected option of each fulfillment method: ``{method, option, amount}`` (no destination)."""
    out = []
    for m in (body.get("fulfillment") or {}).get("methods") or []:
        for g in m.get("groups") or []:
            chosen = next((o for o in g.get("options") or [] if o.get("id") == g.get("selected_option_id")), None)
            if chosen is not None:
                amount = next((t["amount"] for t in chosen.get("totals") or [] if t["type"] == "total"), None)
                out.append(
                    {
                        "method": str(m.get("type") or ""),
                        "option": chosen.get("title") or chosen["id"],
                        "amount": amount,
                    }
                )
    return out


def checkout_view(shop: str, host: str, checkout: Mapping[str, Any], *, status: str) -> dict[str, Any]:
    """The template context of the ``continue_url`` page of a checkout body (UCP checkout.json as
    answered). ``status`` overrides the stored one (an expired session shows as canceled). Buyer,
    destinations and payment are not part of it. ``escalations`` are listed while the checkout is
    ``requires_escalation``, each with the page's ``action`` for it (None: the agent's part)."""
    order = checkout.get("order") or {}
    open_ = status not in TERMINAL
    return {
        "site": shop,
        "title": "Your checkout",
        "checkout_status": status,
        "status_text": _STATUS_TEXT.get(status, status),
        "order_url": f"/orders/{order['id']}" if status == "completed" and order.get("id") else None,
        "order_label": order.get("label") or order.get("id"),
        "expires_at": checkout.get("expires_at") if open_ else None,
        "escalations": confirm.escalations(checkout) if status == "requires_escalation" else [],
        "merchant": shop,
        "merchant_host": host,
        "currency": checkout.get("currency", "USD"),
        "items": [
            {
                "title": li["item"].get("title") or li["item"]["id"],
                "quantity": li["quantity"],
                "price": li["item"].get("price", 0),
                "total": _line_total(li),
            }
            for li in checkout.get("line_items") or []
        ],
        "fulfillment": _fulfillment(checkout),
        "totals": checkout.get("totals") or [],
        "links": [
            {"url": lk["url"], "title": _LINK_TITLES.get(lk.get("type", ""), lk.get("title") or lk.get("type"))}
            for lk in checkout.get("links") or []
        ],
        "problem": None,
        "confirmed_now": False,
        "paid_now": False,
        "form": None,
        "pay": None,
    }


def render_checkout_page(shop: str, checkout: Mapping[str, Any], *, status: str, host: str = "") -> str:
    """The ``continue_url`` page without a form (see :func:`checkout_view`)."""
    return render("checkout.html", **checkout_view(shop, host, checkout, status=status))


def render_order_page(shop: str, order: Mapping[str, Any]) -> str:
    """The ``permalink_url`` page of an order body (UCP order.json, as :func:`render_order` gives
    it): line items with their status, fulfilment events, totals. Destinations are not shown."""
    return render("shop_order.html", site=shop, title=f"Order {order.get('label') or order['id']}", order=order)


def _html(html: str) -> web.Response:
    return web.Response(text=html, content_type="text/html", charset="utf-8", headers=dict(PAGE_HEADERS))


def _message(shop: str, title: str, *lines: str, status: int, back: str | None = None) -> web.Response:
    extra = {"back_url": back, "back_text": "Back to the checkout"} if back else {}
    return page("message.html", status=status, site=shop, title=title, lines=list(lines), **extra)


def _not_found(shop: str, what: str) -> web.Response:
    return _message(shop, "Not found", f"This {what} does not exist.", status=404)


ShopPage = Callable[[web.Request, Company], Awaitable[web.Response]]


def _shop_page(fn: ShopPage) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A route handler that runs ``fn(request, company)`` for the Host's shop, or answers an HTML
    404 when no shop is served on the Host; marked as a page for people (no signature asked)."""

    @human_page
    @functools.wraps(fn)
    async def handler(request: web.Request) -> web.Response:
        try:
            company = await company_of(request)
        except GatewayError:
            return _message("UCP gateway", "Not found", "No shop is served on this host.", status=404)
        return await fn(request, company)

    return handler


def _name(company: Company) -> str:
    return company.display_name or company.slug


@_shop_page
async def home(request: web.Request, company: Company) -> web.Response:
    from .catalog_pages import home_page  # the catalogue's listing (categories, price ranges, pages)

    return await home_page(request, company, _name(company))


def _policy(kind: str):
    path = f"commerce.pages.{kind}"

    @_shop_page
    async def handler(request: web.Request, company: Company) -> web.Response:
        # cosmetic: a page text of the wrong type (or a commerce or pages section that is no object)
        # is read as absent, and the page shows its default text
        body = setting(company, path, text, default=None, on_bad=None)
        return _html(render_policy_page(_name(company), kind, body))

    return handler


def _csrf_of(request: web.Request) -> str | None:
    value = request.cookies.get(CSRF_COOKIE)
    return value if value and _TOKEN.match(value) else None


@_shop_page
async def checkout_page(request: web.Request, company: Company) -> web.Response:
    cid = request.match_info["id"]
    now = request.app[CLOCK].now()
    csrf = _csrf_of(request) or new_token()
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        row = await repo.get_checkout(conn, cid)
        if row is None:
            return _not_found(_name(company), "checkout")
        status = row["status"]
        if status not in TERMINAL and row["expires_at"] <= now:
            status = "canceled"  # expired: the API cancels it on its next read; a page view writes nothing
        body = row["body"]
        view = checkout_view(_name(company), request.host, body, status=status)
        digest = confirm.body_digest(body)
        if any(m["action"] == "confirm" for m in view["escalations"]) and request.method == "GET":
            ttl = request.app[SETTINGS].consent_page_ttl
            token = await confirm.issue_page_token(conn, company.id, cid, digest, csrf, now=now, ttl=ttl)
            view["title"] = "Confirm your order"
            view["form"] = {
                "action": f"/checkout-sessions/{cid}/confirm",
                "token": token,
                "csrf": csrf,
                "total": next((t["amount"] for t in body.get("totals") or [] if t["type"] == "total"), 0),
                "expires_at": rfc3339(now + timedelta(seconds=ttl)),
            }
            if page_pay.pay_ready(body):  # the agent may not place it: the buyer may pay here
                view["pay"] = await page_pay.pay_form(conn, company.id, cid, digest, csrf, view["form"]["total"],
                                                      now=now, ttl=ttl)  # fmt: skip
        elif request.query.get("confirmed") == "1":
            view["confirmed_now"] = await confirm.has_confirmation(conn, cid, digest)
        view["paid_now"] = request.query.get("paid") == "1" and status == "completed"
    resp = page("checkout.html", **view)
    if view["form"] is not None:
        set_cookie(resp, CSRF_COOKIE, csrf, path=_COOKIE_PATH, max_age=request.app[SETTINGS].consent_page_ttl)
    return resp


_NOT_CONFIRMED = {
    "missing": ("Not found", "This checkout does not exist."),
    "closed": ("Not confirmed", "This checkout is no longer open."),
    "changed": ("Not confirmed", "The checkout changed since you opened it: review it again."),
    "nothing": ("Nothing to confirm", "This checkout needs no confirmation now."),
}
_REFUSED = {
    "invalid": "This confirmation is not valid for this checkout.",
    "used": "This confirmation was already used.",
    "expired": "This confirmation has expired.",
}


async def _page_form(request: web.Request, shop: str, back: str, refused: str):
    """``(form, csrf, confirmation token)`` of a checkout page's POST, or the page (titled
    ``refused``) that refuses it: 403 sent from another site, or without both tokens and the
    session's CSRF token."""
    if not same_origin(request):
        return _message(shop, refused, "This form was sent from another site.", status=403, back=back)
    form = await request.post()
    csrf, token = form.get("csrf_token"), form.get("confirmation_token")
    if not isinstance(csrf, str) or not isinstance(token, str) or not tokens_equal(csrf, _csrf_of(request)):
        return _message(
            shop, refused, "The form's security check failed. Open the checkout again.", status=403, back=back
        )
    return form, csrf, token


@_shop_page
async def confirm_checkout(request: web.Request, company: Company) -> web.Response:
    """``POST /checkout-sessions/{id}/confirm`` (form: ``confirmation_token``, ``csrf_token``,
    ``agree=yes``): 303 to the page once confirmed; 403 cross-site or without the CSRF token,
    400 without the agreement, 409 for a spent, expired or foreign token or a changed checkout."""
    shop, cid = _name(company), request.match_info["id"]
    back = f"/checkout-sessions/{cid}"
    posted = await _page_form(request, shop, back, "Not confirmed")
    if isinstance(posted, web.Response):
        return posted
    form, csrf, token = posted
    if form.get("agree") != "yes":
        return _message(shop, "Not confirmed", "Tick the box to agree, then confirm.", status=400, back=back)
    now = request.app[CLOCK].now()
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        digest, why = await confirm.spend_page_token(conn, cid, token, csrf, now=now)
        if digest is None:
            return _message(shop, "Not confirmed", _REFUSED[why], "Open the checkout again.", status=409, back=back)
        why = await confirm.confirm_as_shown(conn, company.id, cid, digest, now=now)
    if why:
        return _message(shop, *_NOT_CONFIRMED[why], status=404 if why == "missing" else 409, back=back)
    raise web.HTTPSeeOther(f"{back}?confirmed=1", headers=dict(PAGE_HEADERS))


@_shop_page
async def pay_checkout(request: web.Request, company: Company) -> web.Response:
    """``POST /checkout-sessions/{id}/pay``: the buyer pays on the page (:mod:`.page_pay`)."""
    shop, cid = _name(company), request.match_info["id"]
    back = f"/checkout-sessions/{cid}"
    posted = await _page_form(request, shop, back, "Not paid")
    if isinstance(posted, web.Response):
        return posted
    form, csrf, token = posted
    refused = page_pay.pay_refusal(form, request.app[CLOCK].now())
    if refused:
        return _message(shop, "Not paid", refused, status=400, back=back)
    status, why = await page_pay.pay(request, company, cid, token, csrf, form)
    if status == 303:
        raise page_pay.see_page(cid)
    return _message(shop, "Not paid", why, "Open the checkout again.", status=status, back=back)


@_shop_page
async def order_page(request: web.Request, company: Company) -> web.Response:
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        order, events, adjs = await repo.get_order_rows(conn, request.match_info["id"])
    if order is None:
        return _not_found(_name(company), "order")
    body = order_from_rows(order, events, adjs, {})
    return page("shop_order.html", site=_name(company), title=f"Order {body.get('label') or body['id']}", order=body)


def setup_pages(app: web.Application) -> None:
    """Add the pages' routes at the server root (GET also answers HEAD) and the stylesheet."""
    setup_assets(app)
    app.router.add_get("/", home)
    app.router.add_get("/terms", _policy("terms"))
    app.router.add_get("/privacy", _policy("privacy"))
    app.router.add_get("/checkout-sessions/{id}", checkout_page)
    app.router.add_post("/checkout-sessions/{id}/confirm", confirm_checkout)
    app.router.add_post("/checkout-sessions/{id}/pay", pay_checkout)
    app.router.add_get("/orders/{id}", order_page)
    from .catalog_pages import setup_catalog_pages

    setup_catalog_pages(app)  # product and cart pages, /llms.txt, /robots.txt, /sitemap.xml

"""The shop's buyer-facing web pages: the URLs that UCP responses hand to people.

- ``GET /``: the shop's home page with its products (the ``continue_url`` of ``not_found`` envelopes);
- ``GET /terms`` and ``GET /privacy``: the checkout's ``links[]`` (``terms_of_service``,
  ``privacy_policy``), with the text in the company's ``settings.commerce.pages`` (``terms``, ``privacy``);
- ``GET /checkout-sessions/{id}``: the checkout's ``continue_url`` (UCP checkout.md: "an opaque
  server-side URL such as https://shop/checkout-sessions/{id}"), where a person picks up a session;
- ``GET /orders/{id}``: the order's ``permalink_url``.

They are pages for people, so the signature layer asks no RFC 9421 signature of them
(:func:`ucp_gateway.appkeys.human_page`). The session and order ids are unguessable (122 random
bits), so these pages work as capability URLs, and they show nothing personal: items, quantities,
prices, totals and status. They leave out buyer, addresses and payment. They are answered with
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store``, so the id does not leak through
Referer headers or shared caches. The renderers are pure (:func:`render_checkout_page`,
:func:`render_order_page`, ...) and escape every value; the handlers
only read, inside a tenant transaction (RLS).
"""

from __future__ import annotations

import functools
import html
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, human_page
from ..company_settings import setting, text
from ..db import tenant_tx
from ..errors import GatewayError
from ..tenancy import Company
from . import repo
from .context import company_of
from .orders import render_order
from .service import _adj_wire, _event_wire  # the API's own wire shapes of order rows
from .status import TERMINAL

__all__ = [
    "format_money",
    "render_checkout_page",
    "render_home_page",
    "render_order_page",
    "render_policy_page",
    "setup_pages",
]

# ISO 4217 minor-unit exponents other than 2 (money is integer minor units everywhere else)
_EXPONENT = {
    **dict.fromkeys(("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND"), 0),
    **dict.fromkeys(("VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}
_POLICIES = {"terms": "Terms of service", "privacy": "Privacy policy"}
_STATUS_TEXT = {
    "incomplete": "Your agent is still putting this checkout together. Go back to it to finish.",
    "requires_escalation": "This checkout needs your input. Go back to your agent to continue.",
    "ready_for_complete": "This checkout is ready to pay. Go back to your agent to confirm it.",
    "complete_in_progress": "Payment for this checkout is being processed.",
    "completed": "This checkout is complete.",
    "canceled": "This checkout was canceled.",
}
_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:42rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "table{border-collapse:collapse;width:100%}td,th{padding:.3rem .4rem;border-bottom:1px solid #ddd;"
    "text-align:left}td.n,th.n{text-align:right}footer{margin-top:2rem;font-size:.85rem;color:#666}"
)
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src https:; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def format_money(amount: int, currency: str) -> str:
    """``amount`` (integer minor units) as text, e.g. ``(1850, "USD") -> "USD 18.50"``,
    ``(-150, "USD") -> "-USD 1.50"``, ``(500, "JPY") -> "JPY 500"`` (ISO 4217 exponents)."""
    exp = _EXPONENT.get(currency.upper(), 2)
    sign, value = ("-" if amount < 0 else ""), abs(int(amount))
    if exp == 0:
        return f"{sign}{currency} {value}"
    return f"{sign}{currency} {value // 10**exp}.{value % 10**exp:0{exp}d}"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _page(shop: str, title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="robots" content="noindex"><title>{_e(title)} | {_e(shop)}</title>'
        f'<style>{_CSS}</style></head><body><header><a href="/">{_e(shop)}</a></header>'
        f"<main><h1>{_e(title)}</h1>{body}</main>"
        '<footer><a href="/terms">Terms of service</a> · <a href="/privacy">Privacy policy</a></footer>'
        "</body></html>"
    )


def _totals(totals: Iterable[Mapping[str, Any]], currency: str) -> str:
    rows = "".join(
        f"<tr><th>{_e(t.get('display_text') or t['type'].replace('_', ' ').capitalize())}</th>"
        f'<td class="n">{_e(format_money(t["amount"], currency))}</td></tr>'
        for t in totals
    )
    return f"<table>{rows}</table>"


def _line_total(li: Mapping[str, Any]) -> int:
    return next((t["amount"] for t in li.get("totals") or [] if t["type"] == "total"), 0)


def render_home_page(shop: str, products: Iterable[Mapping[str, Any]]) -> str:
    """The home page: ``products`` are ``{id, title, price (minor units), currency}`` mappings."""
    rows = "".join(
        f'<tr><td>{_e(p["title"])}</td><td class="n">{_e(format_money(p["price"], p["currency"]))}</td></tr>'
        for p in products
    )
    head = '<tr><th>Product</th><th class="n">Price</th></tr>'
    body = f"<table>{head}{rows}</table>" if rows else "<p>No products.</p>"
    return _page(shop, shop, "<p>Shop with your AI agent: it finds this shop at /.well-known/ucp.</p>" + body)


def render_policy_page(shop: str, kind: str, text: str | None) -> str:
    """A policy page (``kind`` ``terms`` or ``privacy``); ``text`` is plain text, paragraphs split
    on blank lines; None says that the shop has not published one."""
    title = _POLICIES[kind]
    if not text:
        return _page(shop, title, f"<p>{_e(shop)} has not published its {_e(title.lower())} here yet.</p>")
    paras = "".join(f"<p>{_e(p.strip())}</p>" for p in text.split("\n\n") if p.strip())
    return _page(shop, title, paras)


def render_checkout_page(shop: str, checkout: Mapping[str, Any], *, status: str) -> str:
    """The ``continue_url`` page of a checkout body (UCP checkout.json as answered): items,
    quantities, totals and what happens next. ``status`` overrides the stored one (an expired
    session shows as canceled). Buyer, destinations and payment are not shown."""
    cur = checkout.get("currency", "USD")
    items = "".join(
        f'<tr><td>{_e(li["item"].get("title") or li["item"]["id"])}</td><td class="n">{_e(li["quantity"])}</td>'
        f'<td class="n">{_e(format_money(_line_total(li), cur))}</td></tr>'
        for li in checkout.get("line_items") or []
    )
    body = f"<p>{_e(_STATUS_TEXT.get(status, status))}</p>"
    order = checkout.get("order") or {}
    if status == "completed" and order.get("id"):
        body += f'<p>Order <a href="/orders/{_e(order["id"])}">{_e(order.get("label") or order["id"])}</a>.</p>'
    if status not in TERMINAL and checkout.get("expires_at"):
        body += f"<p>Open until {_e(checkout['expires_at'])}.</p>"
    body += f'<table><tr><th>Item</th><th class="n">Quantity</th><th class="n">Amount</th></tr>{items}</table>'
    body += _totals(checkout.get("totals") or [], cur)
    return _page(shop, "Your checkout", body)


def render_order_page(shop: str, order: Mapping[str, Any]) -> str:
    """The ``permalink_url`` page of an order body (UCP order.json, as :func:`render_order` gives
    it): line items with their status, fulfilment events, totals. Destinations are not shown."""
    cur = order.get("currency", "USD")
    items = "".join(
        f"<tr><td>{_e(li['item'].get('title') or li['item']['id'])}</td>"
        f'<td class="n">{_e(li["quantity"]["total"])}</td><td>{_e(li.get("status", ""))}</td></tr>'
        for li in order.get("line_items") or []
    )
    evs = (order.get("fulfillment") or {}).get("events") or []
    events = "".join(f"<li>{_e(ev['type'])} at {_e(ev['occurred_at'])}</li>" for ev in evs)
    body = f'<table><tr><th>Item</th><th class="n">Quantity</th><th>Status</th></tr>{items}</table>'
    body += f"<h2>Fulfillment</h2><ul>{events}</ul>" if events else "<p>Not shipped yet.</p>"
    body += _totals(order.get("totals") or [], cur)
    return _page(shop, f"Order {order.get('label') or order['id']}", body)


def _html(text: str, *, status: int = 200, cache: str = "no-store") -> web.Response:
    headers = {**_HEADERS, "Cache-Control": cache}
    return web.Response(status=status, text=text, content_type="text/html", charset="utf-8", headers=headers)


def _not_found(shop: str, what: str) -> web.Response:
    return _html(_page(shop, "Not found", f"<p>This {_e(what)} does not exist.</p>"), status=404)


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
            return _html(_page("UCP gateway", "Not found", "<p>No shop is served on this host.</p>"), status=404)
        return await fn(request, company)

    return handler


def _name(company: Company) -> str:
    return company.display_name or company.slug


@_shop_page
async def home(request: web.Request, company: Company) -> web.Response:
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        products = await conn.fetch("SELECT id, title, price, currency FROM products ORDER BY title, id LIMIT 500")
    rows = [{**dict(p), "currency": p["currency"].strip()} for p in products]
    return _html(render_home_page(_name(company), rows), cache="public, max-age=60")


def _policy(kind: str):
    path = f"commerce.pages.{kind}"

    @_shop_page
    async def handler(request: web.Request, company: Company) -> web.Response:
        # cosmetic: a page text of the wrong type (or a commerce or pages section that is no object)
        # is read as absent, and the page shows its default text
        body = setting(company, path, text, default=None, on_bad=None)
        return _html(render_policy_page(_name(company), kind, body), cache="public, max-age=300")

    return handler


@_shop_page
async def checkout_page(request: web.Request, company: Company) -> web.Response:
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        row = await repo.get_checkout(conn, request.match_info["id"])
    if row is None:
        return _not_found(_name(company), "checkout")
    status = row["status"]
    if status not in TERMINAL and row["expires_at"] <= request.app[CLOCK].now():
        status = "canceled"  # expired: the API cancels it on its next read; a page view writes nothing
    return _html(render_checkout_page(_name(company), row["body"], status=status))


@_shop_page
async def order_page(request: web.Request, company: Company) -> web.Response:
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        order, events, adjs = await repo.get_order_rows(conn, request.match_info["id"])
    if order is None:
        return _not_found(_name(company), "order")
    body = render_order(order["snapshot"], [_event_wire(e) for e in events], [_adj_wire(a) for a in adjs], {})
    return _html(render_order_page(_name(company), body))


def setup_pages(app: web.Application) -> None:
    """Add the pages' GET (and HEAD) routes at the server root."""
    app.router.add_get("/", home)
    app.router.add_get("/terms", _policy("terms"))
    app.router.add_get("/privacy", _policy("privacy"))
    app.router.add_get("/checkout-sessions/{id}", checkout_page)
    app.router.add_get("/orders/{id}", order_page)

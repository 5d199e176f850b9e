"""The catalogue for people and for the agents that read plain documents, from the same data the
UCP catalog operations answer with:

- ``GET /`` (through :func:`home_page`): the shop's products, by category (``?category=``), with
  price ranges and availability, 50 a page (``?after=`` the last handle of the previous page);
- ``GET /products/{handle}``: a product page, the catalog's ``url`` (``?variant=`` marks one);
- ``GET /carts/{id}``: a cart's ``continue_url``: items and estimated totals (the id is an
  unguessable capability, 128 random bits; nothing personal is shown);
- ``GET /llms.txt`` (llmstxt.org): what the shop sells and where an agent starts
  (``/.well-known/ucp``, the UCP services of the profile, the catalog tools), generated from the
  company's profile and catalogue; ``GET /robots.txt`` and ``GET /sitemap.xml`` (the product pages).

Pages are Jinja2 templates (autoescape) through :func:`ucp_gateway.htmlpage.page`; the text
documents are public and cacheable for 5 minutes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from xml.sax.saxutils import escape

from aiohttp import web

from ..appkeys import DATABASE, SETTINGS, human_page
from ..db import tenant_tx
from ..errors import GatewayError
from ..htmlpage import format_money, page
from ..tenancy import Company
from . import catalog_search, catalog_store
from .catalog_search import SearchQuery
from .catalog_wire import render_product
from .context import _origin, build_context, company_of
from .service import price_state

__all__ = ["home_page", "llms_txt", "setup_catalog_pages"]

HOME_PAGE_SIZE = 50
_TEXT_HEADERS = {"Cache-Control": "public, max-age=300", "X-Content-Type-Options": "nosniff"}


def _origin_of(request: web.Request) -> str:
    s = request.app[SETTINGS]
    return _origin(s.public_scheme, request.host, s.public_port)


async def home_page(request: web.Request, company: Company, site: str) -> web.Response:
    """The home page of ``company`` (``site``: its display name)."""
    category = request.query.get("category") or None
    after = request.query.get("after") or ""
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        q = SearchQuery(text=None, categories=(category,) if category else (), sort="title",
                        limit=HOME_PAGE_SIZE, after=None)  # fmt: skip
        if after:
            last = await conn.fetchrow("SELECT lower(title) AS k, id FROM catalog_products WHERE handle = $1", after)
            if last is not None:
                q = replace(q, after=(last["k"], last["id"]))
        rows = await catalog_search.search_rows(conn, q)
        categories = await conn.fetchval(
            "SELECT coalesce(array_agg(c ORDER BY c), '{}') FROM"
            " (SELECT DISTINCT unnest(categories) AS c FROM catalog_products LIMIT 200) x"
        )
    more = len(rows) > HOME_PAGE_SIZE
    rows = rows[:HOME_PAGE_SIZE]
    products = [
        {"title": r["title"], "path": f"/products/{r['handle']}", "min_price": r["min_price"],
         "max_price": r["max_price"], "currency": (r["currency"] or "USD").strip(), "available": r["available"]}
        for r in rows
    ]  # fmt: skip
    next_url = None
    if more:
        next_url = f"/?after={rows[-1]['handle']}" + (f"&category={category}" if category else "")
    return page("catalog_home.html", site=site, title=site, products=products, categories=list(categories),
                category=category, next_url=next_url)  # fmt: skip


def _shop(fn):
    @human_page
    async def handler(request: web.Request) -> web.Response:
        try:
            company = await company_of(request)
        except GatewayError:
            raise web.HTTPNotFound(text="No shop is served on this host.") from None
        return await fn(request, company)

    handler.__name__ = fn.__name__
    return handler


@_shop
async def product_page(request: web.Request, company: Company) -> web.Response:
    handle = request.match_info["handle"]
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        row = await catalog_store.get_rows(conn, handle)
    site = company.display_name or company.slug
    if row is None or row["handle"] != handle or not row["variants"]:
        return page("message.html", status=404, site=site, title="Not found", lines=["No such product."])
    product = render_product(row, _origin_of(request))
    return page("catalog_product.html", site=site, title=product["title"], product=product,
                selected=request.query.get("variant"))  # fmt: skip


@_shop
async def cart_page(request: web.Request, company: Company) -> web.Response:
    cart_id = request.match_info["id"]
    site = company.display_name or company.slug
    ctx = build_context(request, company, "", None)
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        row = await conn.fetchrow("SELECT state, expires_at FROM carts WHERE id = $1", cart_id)
        if row is None or row["expires_at"] <= ctx.now:
            return page("message.html", status=404, site=site, title="Not found", lines=["No such cart."])
        priced = await price_state(conn, ctx, row["state"])
    cart = {"line_items": priced.line_items, "totals": priced.totals, "currency": ctx.currency}
    return page("catalog_cart.html", site=site, title="Your cart", cart=cart)


def _products(n: int) -> str:
    return "1 product" if n == 1 else f"{n} products"


def llms_txt(site: str, origin: str, profile: dict[str, Any], rows: list[dict[str, Any]],
             categories: list[tuple[str, int]], total: int) -> str:  # fmt: skip
    """The llms.txt document (pure): title, summary, the UCP entry points, categories, products."""
    ucp = profile.get("ucp") or {}
    lines = [f"# {site}", ""]
    cats = ", ".join(c for c, _ in categories[:8])
    lines += [f"> {site} sells {_products(total)}{f' ({cats})' if cats else ''} to people and to AI buyer agents "
              "over the Universal Commerce Protocol (UCP).", ""]  # fmt: skip
    lines += [f"Agents start at [{origin}/.well-known/ucp]({origin}/.well-known/ucp): the UCP profile "
              f"(version {ucp.get('version', '')}, services, capabilities, signing keys). Sign every request "
              "(RFC 9421) and send `UCP-Agent: profile=\"<your profile URL>\"`.", ""]  # fmt: skip
    lines += ["## UCP services", ""]
    for name, entries in (ucp.get("services") or {}).items():
        for e in entries:
            lines.append(f"- [{name} over {e.get('transport')}]({e.get('endpoint')}): version {e.get('version')}")
    caps = sorted(ucp.get("capabilities") or {})
    lines += ["", "## Capabilities", ""] + [f"- {c}" for c in caps]
    lines += ["", "## How to shop", "",
              "- Search: REST `POST <rest endpoint>/catalog/search` with `{\"query\": \"red roses\"}`, or the MCP tool "
              "`search_catalog` with `{\"catalog\": {\"query\": \"red roses\"}}`; filters `categories`, `price` "
              "(minor units), `available`; next pages with `pagination.cursor`.",
              "- Look up: `POST /catalog/lookup` (`lookup_catalog`) with product or variant ids, SKUs or GTINs; "
              "`POST /catalog/product` (`get_product`) for options and availability.",
              "- Buy: `POST /carts` (`create_cart`), then `POST /checkout-sessions` (`create_checkout`) with "
              "`cart_id`, then complete it with a payment credential.", ""]  # fmt: skip
    if categories:
        lines += ["## Categories", ""]
        lines += [f"- [{c}]({origin}/?category={c.replace(' ', '%20').replace('&', '%26')}): {_products(n)}"
                  for c, n in categories]  # fmt: skip
        lines.append("")
    lines += ["## Products", ""]
    for r in rows:
        cur = (r["currency"] or "USD").strip()
        price = format_money(r["min_price"] or 0, cur)
        if r["max_price"] != r["min_price"]:
            price += " to " + format_money(r["max_price"] or 0, cur)
        stock = "" if r["available"] else ", out of stock"
        lines.append(f"- [{r['title']}]({origin}/products/{r['handle']}): {price}{stock}")
    if total > len(rows):
        lines.append(f"- ... and {total - len(rows)} more: search the catalog")
    return "\n".join(lines) + "\n"


async def _llms(request: web.Request, company: Company) -> web.Response:
    origin = _origin_of(request)
    from ..discovery.web import company_profile_document  # the root version's document

    profile = await company_profile_document(request.app, company, origin)
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        rows = await catalog_search.search_rows(conn, SearchQuery(text=None, sort="title", limit=100))
        total = await conn.fetchval("SELECT count(*) FROM catalog_products WHERE min_price IS NOT NULL")
        cats = await conn.fetch(
            "SELECT c, count(*) AS n FROM catalog_products, unnest(categories) AS c"
            " WHERE min_price IS NOT NULL GROUP BY c ORDER BY n DESC, c LIMIT 50"
        )
    text = llms_txt(company.display_name or company.slug, origin, profile, rows[:100],
                    [(r["c"], r["n"]) for r in cats], total)  # fmt: skip
    return web.Response(text=text, content_type="text/markdown", charset="utf-8", headers=_TEXT_HEADERS)


async def _robots(request: web.Request, company: Company) -> web.Response:
    origin = _origin_of(request)
    text = (f"User-agent: *\nAllow: /\nDisallow: /checkout-sessions/\nDisallow: /orders/\nDisallow: /carts/\n"
            f"Sitemap: {origin}/sitemap.xml\n# Agents: {origin}/llms.txt and {origin}/.well-known/ucp\n")  # fmt: skip
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers=_TEXT_HEADERS)


async def _sitemap(request: web.Request, company: Company) -> web.Response:
    origin = _origin_of(request)
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        handles = await conn.fetch(
            "SELECT handle FROM catalog_products WHERE min_price IS NOT NULL ORDER BY handle LIMIT 50000"
        )
    urls = "".join(f"<url><loc>{escape(origin)}/products/{escape(h['handle'])}</loc></url>" for h in handles)
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{escape(origin)}/</loc></url>{urls}</urlset>\n")  # fmt: skip
    return web.Response(text=body, content_type="application/xml", charset="utf-8", headers=_TEXT_HEADERS)


def setup_catalog_pages(app: web.Application) -> None:
    """Add the product and cart pages and the agent-discovery text documents (server root)."""
    app.router.add_get("/products/{handle}", product_page)
    app.router.add_get("/carts/{id}", cart_page)
    app.router.add_get("/llms.txt", _shop(_llms))
    app.router.add_get("/robots.txt", _shop(_robots))
    app.router.add_get("/sitemap.xml", _shop(_sitemap))

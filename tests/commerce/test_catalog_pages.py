"""The catalogue for people (home, product and cart pages) and for text-reading agents (/llms.txt,
/robots.txt, /sitemap.xml), from the same data as the UCP catalog operations."""

from __future__ import annotations

from ucp_gateway.commerce.catalog_cli import import_items
from ucp_gateway.commerce.catalog_feed import parse_feed

from .conftest import headers, new_key, url


async def test_home_lists_products_by_category_with_price_ranges(client):
    r = await client.get("/")
    page = await r.text()
    assert r.status == 200 and r.headers["Cache-Control"] == "no-store"
    assert '<a href="/products/roses-red">Bouquet of Red Roses</a>' in page
    assert "USD 35.00 to USD 90.00" in page and "USD 15.00" in page
    r = await client.get("/?category=Orchids")
    page = await r.text()
    assert "White Orchid" in page and "Bouquet of Red Roses" not in page


async def test_product_page_shows_variants_and_unknown_is_404(client):
    r = await client.get("/products/roses-red?variant=roses_red_24")
    page = await r.text()
    assert r.status == 200
    assert "FS-ROSES-RED-24" in page and "<del>USD 70.00</del>" in page and 'aria-current="true"' in page
    assert (await client.get("/products/nope")).status == 404


async def test_product_text_is_escaped(client, database, company):
    feed = b"product_id,title,sku,price,description\nevil,<script>alert(1)</script>,EVIL-1,100,<b>x</b>\n"
    items, _ = parse_feed(feed, "csv")
    await import_items(database, company.id, items)
    page = await (await client.get("/products/evil")).text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;x" in page


async def test_cart_continue_url_page_shows_items_and_totals(client):
    r = await client.post(url("/carts"), json={"line_items": [{"item": {"id": "tulips_red"}, "quantity": 2}]},
                          headers=headers(key=new_key()))  # fmt: skip
    cart = await r.json()
    path = "/" + cart["continue_url"].split("/", 3)[3]
    page = await (await client.get(path)).text()
    assert "Spring Tulips (Red)" in page and "USD 60.00" in page
    assert (await client.get("/carts/cart_nope")).status == 404


async def test_llms_txt_robots_and_sitemap_point_agents_at_ucp(client):
    r = await client.get("/llms.txt")
    text = await r.text()
    assert r.status == 200 and r.content_type == "text/markdown" and "public" in r.headers["Cache-Control"]
    assert text.startswith("# Flower Shop\n")
    assert "/.well-known/ucp" in text and "dev.ucp.shopping.catalog.search" in text
    assert "/ucp/v1" in text and "search_catalog" in text
    assert "- [Bouquet of Red Roses](https://" in text and "/products/roses-red): USD 35.00 to USD 90.00" in text
    assert "out of stock" in text  # the gardenias
    assert "): 1 product\n" in text and "1 products" not in text  # the demo's one Greenery product
    robots = await (await client.get("/robots.txt")).text()
    assert "Sitemap: https://" in robots and "Disallow: /checkout-sessions/" in robots
    sitemap = await (await client.get("/sitemap.xml")).text()
    assert sitemap.count("<url>") == 35 and "/products/roses-red</loc>" in sitemap

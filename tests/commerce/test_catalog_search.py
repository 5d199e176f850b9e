"""The searchable catalogue on PostgreSQL (migration 0065): the demo's products with variants,
search (stemming, ranking, filters, sort, cursors, typo fallback), lookup and get_product through
the catalog operations, on the app role (RLS)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ucp_gateway.commerce import catalog_service
from ucp_gateway.commerce.checkout import ShopInfo
from ucp_gateway.commerce.service import CommerceContext
from ucp_gateway.db import tenant_tx
from ucp_gateway.errors import BadRequest
from ucp_gateway.tenancy import create_company


def ctx_for(company) -> CommerceContext:
    shop = ShopInfo(base_url="http://127.0.0.1", ucp={"version": "2026-04-08", "capabilities": {}})
    return CommerceContext(
        company_id=company.id, caller="unverified:test", now=datetime.now(UTC), shop=shop, order_ucp={},
        handler_ids=frozenset(),
    )  # fmt: skip


async def call(database, company, op, data):
    async with tenant_tx(database.pool, company.id) as conn:
        out = await getattr(catalog_service, op)(conn, ctx_for(company), data)
    assert out.status == 200
    return out.body


async def test_demo_catalog_has_products_with_variants_and_checkout_items(database, company):
    async with tenant_tx(database.pool, company.id) as conn:
        n_products = await conn.fetchval("SELECT count(*) FROM catalog_products")
        roses = await conn.fetchrow("SELECT * FROM catalog_products WHERE id = 'roses-red'")
        item = await conn.fetchrow("SELECT * FROM products WHERE id = 'bouquet_roses'")
    assert n_products >= 30
    assert (roses["min_price"], roses["max_price"], roses["available"]) == (3500, 9000, True)
    # the checkout item keeps its conformance title and price, and is a variant now
    assert (item["title"], item["price"], item["product_id"], item["sku"]) == (
        "Bouquet of Red Roses", 3500, "roses-red", "FS-BOUQUET-ROSES"
    )  # fmt: skip


async def test_red_roses_ranked_first_with_stemming(database, company):
    body = await call(database, company, "search", {"query": "red roses"})
    ids = [p["id"] for p in body["products"]]
    assert "roses-red" in ids[:4] and all("Rose" in p["title"] or "rose" in p["title"] for p in body["products"][:4])
    assert {"rose-petals", "red-roses-heart"} <= set(ids)
    first = body["products"][ids.index("roses-red")]
    assert first["price_range"] == {
        "min": {"amount": 3500, "currency": "USD"},
        "max": {"amount": 9000, "currency": "USD"},
    }
    assert [v["id"] for v in first["variants"]] == ["bouquet_roses", "roses_red_24", "roses_red_36"]
    assert first["variants"][0]["availability"] == {"available": True, "status": "in_stock"}
    assert first["variants"][1]["list_price"] == {"amount": 7000, "currency": "USD"}
    assert first["options"] == [
        {"name": "Stems", "values": [{"label": "12 stems"}, {"label": "24 stems"}, {"label": "36 stems"}]}
    ]
    assert first["url"] == "http://127.0.0.1/products/roses-red"
    # stemming: "rose" finds what "roses" finds
    assert ids == [p["id"] for p in (await call(database, company, "search", {"query": "red rose"}))["products"]]


async def test_filters_sort_and_cursor_pages_cover_everything_once(database, company):
    seen: list[str] = []
    req = {"filters": {"categories": ["Plants"]}, "sort": "price_asc", "pagination": {"limit": 2}}
    prices = []
    for _ in range(20):
        body = await call(database, company, "search", req)
        seen += [p["id"] for p in body["products"]]
        prices += [p["price_range"]["min"]["amount"] for p in body["products"]]
        assert len(body["products"]) <= 2
        if not body["pagination"]["has_next_page"]:
            break
        req = {**req, "pagination": {"limit": 2, "cursor": body["pagination"]["cursor"]}}
    assert len(seen) == len(set(seen)) >= 8
    assert prices == sorted(prices)
    async with tenant_tx(database.pool, company.id) as conn:
        plants = await conn.fetchval("SELECT count(*) FROM catalog_products WHERE 'Plants' = ANY(categories)")
    assert len(seen) == plants
    cheap = await call(database, company, "search", {"query": "roses", "filters": {"price": {"max": 1000}}})
    assert [p["id"] for p in cheap["products"]] == ["rose-long-stem"]
    out = await call(database, company, "search", {"query": "gardenia", "filters": {"available": False}})
    assert [p["id"] for p in out["products"]] == ["gardenias"]
    assert out["products"][0]["variants"][0]["availability"]["status"] == "out_of_stock"


async def test_typo_falls_back_to_similar_products(database, company):
    body = await call(database, company, "search", {"query": "tulpis"})
    assert body["products"] and body["products"][0]["id"] in ("tulips-spring", "tulip-bulbs")
    assert body["messages"][0]["code"] == "fuzzy_match"
    none = await call(database, company, "search", {"query": "zzzqqqxxx"})
    assert none["products"] == [] and none["pagination"] == {"has_next_page": False}


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ({}, "invalid_request"),
        ({"query": "x" * 10_000}, "invalid_request"),
        ({"query": 5}, "invalid_request"),
        ({"query": "   "}, "invalid_request"),
        ({"query": "a", "filters": {"price": {"max": "10"}}}, "invalid_request"),
        ({"query": "a", "filters": {"categories": "Roses"}}, "invalid_request"),
        ({"query": "a", "filters": {"available": "yes"}}, "invalid_request"),
        ({"query": "a", "pagination": {"cursor": "!!"}}, "invalid_cursor"),
        ({"query": "a", "pagination": {"cursor": "bm90LWpzb24"}}, "invalid_cursor"),
        ({"query": "a", "pagination": {"limit": 0}}, "invalid_request"),
        ({"query": "a", "sort": "random"}, "invalid_request"),
    ],
)
async def test_bad_search_input_is_a_400_naming_it(database, company, data, code):
    with pytest.raises(BadRequest) as exc:
        await call(database, company, "search", data)
    assert exc.value.code == code and exc.value.http_status == 400


async def test_a_cursor_of_another_sort_is_refused(database, company):
    body = await call(database, company, "search", {"filters": {"categories": ["Roses"]}, "sort": "title",
                                                    "pagination": {"limit": 1}})  # fmt: skip
    cursor = body["pagination"]["cursor"]
    with pytest.raises(BadRequest) as exc:
        await call(database, company, "search", {"filters": {}, "sort": "price_asc", "pagination": {"cursor": cursor}})
    assert exc.value.code == "invalid_cursor"


async def test_lookup_by_product_variant_sku_gtin_and_handle_in_one_call(database, company):
    async with tenant_tx(database.pool, company.id) as conn:
        gtin = await conn.fetchval("SELECT gtin FROM products WHERE id = 'tulips_red'")
    ids = ["roses-red", "roses_red_24", "FS-POT-CERAMIC-SAGE", gtin, "monstera", "nope", "roses-red"]
    body = await call(database, company, "lookup", {"ids": ids})
    by_id = {p["id"]: p for p in body["products"]}
    assert set(by_id) == {"roses-red", "pot-ceramic", "tulips-spring", "monstera"}
    roses = {v["id"]: v["inputs"] for v in by_id["roses-red"]["variants"]}
    assert roses == {"bouquet_roses": [{"id": "roses-red", "match": "featured"}],
                     "roses_red_24": [{"id": "roses_red_24", "match": "exact"}]}  # fmt: skip
    assert by_id["pot-ceramic"]["variants"][0]["inputs"] == [{"id": "FS-POT-CERAMIC-SAGE", "match": "exact"}]
    assert by_id["tulips-spring"]["variants"][0]["id"] == "tulips_red"
    assert body["messages"] == [{"type": "info", "content": "nope", "code": "not_found"}]
    with pytest.raises(BadRequest) as exc:
        await call(database, company, "lookup", {"ids": [f"x{i}" for i in range(51)]})
    assert exc.value.code == "request_too_large"


async def test_get_product_selection_relaxation_and_availability(database, company):
    body = await call(database, company, "get_product", {"id": "roses-garden",
                      "selected": [{"name": "Colour", "label": "Peach"}, {"name": "Size", "label": "Deluxe"}],
                      "preferences": ["Colour", "Size"]})  # fmt: skip
    p = body["product"]
    # Peach/Deluxe does not exist: Size (last preference) is dropped first; Peach is out of stock
    assert p["selected"] == [{"name": "Colour", "label": "Peach"}, {"name": "Size", "label": "Standard"}]
    assert p["variants"][0]["id"] == "roses_garden_peach_std"
    size = {v["label"]: (v["exists"], v["available"]) for v in p["options"][1]["values"]}
    assert size == {"Standard": (True, False), "Deluxe": (False, False)}
    colour = {v["label"]: (v["exists"], v["available"]) for v in p["options"][0]["values"]}
    assert colour == {"Pink": (True, True), "White": (True, True), "Peach": (True, False)}
    # a variant id: that variant first, its options are the selection
    body = await call(
        database, company, "get_product", {"id": "roses_red_36", "selected": [{"name": "Stems", "label": "12 stems"}]}
    )
    assert body["product"]["variants"][0]["id"] == "roses_red_36"
    assert body["product"]["selected"] == [{"name": "Stems", "label": "36 stems"}]
    missing = await call(database, company, "get_product", {"id": "nope"})
    assert missing["ucp"]["status"] == "error"
    assert missing["messages"][0]["code"] == "not_found" and missing["messages"][0]["severity"] == "unrecoverable"


async def test_stock_reaching_zero_makes_the_product_unavailable(database, company):
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE inventory SET quantity = 0 WHERE product_id = 'ranunculus_pastel'")
        assert await conn.fetchval("SELECT available FROM catalog_products WHERE id = 'ranunculus'") is False
        await conn.execute("UPDATE inventory SET quantity = 3 WHERE product_id = 'ranunculus_pastel'")
        assert await conn.fetchval("SELECT available FROM catalog_products WHERE id = 'ranunculus'") is True
        await conn.execute("UPDATE products SET price = 100 WHERE id = 'ranunculus_pastel'")
        assert await conn.fetchval("SELECT min_price FROM catalog_products WHERE id = 'ranunculus'") == 100


async def test_one_company_never_sees_another_companys_products(database, company):
    other = await create_company(database.pool, slug="other-shop", display_name="Other", hostnames=("other.example",))
    async with tenant_tx(database.pool, other.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM catalog_products") == 0
        assert await conn.fetchval("SELECT count(*) FROM products") == 0
        body = await catalog_service.search(conn, ctx_for(other), {"query": "red roses"})
        assert body.body["products"] == []
        looked = await catalog_service.lookup(conn, ctx_for(other), {"ids": ["roses-red", "bouquet_roses"]})
        assert looked.body["products"] == []
        got = await catalog_service.get_product(conn, ctx_for(other), {"id": "roses-red"})
        assert got.body["ucp"]["status"] == "error"
    async with database.pool.acquire() as conn:  # the app role with no tenant: nothing at all
        assert await conn.fetchval("SELECT count(*) FROM catalog_products") == 0


async def test_lookup_filters_apply_after_resolution(database, company):
    full = (await call(database, company, "get_product", {"id": "roses-red"}))["product"]
    price = {v["id"]: v["price"]["amount"] for v in full["variants"]}
    cheapest = min(price, key=price.get)
    ids = ["roses-red", *price]
    body = await call(database, company, "lookup", {"ids": ids, "filters": {"price": {"max": price[cheapest]}}})
    (product,) = body["products"]
    # the named product's featured variant is chosen among those kept; the named dearer ones drop out
    assert [(v["id"], v["inputs"]) for v in product["variants"]] == [
        (cheapest, sorted([{"id": "roses-red", "match": "featured"}, {"id": cheapest, "match": "exact"}],
                          key=lambda i: i["id"]))
    ]  # fmt: skip
    assert "messages" not in body  # every id is known: none is reported not_found
    for filters in ({"categories": ["No Such Category"]}, {"price": {"min": max(price.values()) + 1}}):
        body = await call(database, company, "lookup", {"ids": [*ids, "nope"], "filters": filters})
        assert body["products"] == [] and body["messages"] == [{"type": "info", "content": "nope", "code": "not_found"}]
    # a price filter is in context.currency: the shop's prices are USD, so a EUR range matches nothing
    eur = {"ids": ids, "filters": {"price": {"max": 10**9}}, "context": {"currency": "EUR"}}
    assert (await call(database, company, "lookup", eur))["products"] == []
    cats = [c["value"] for c in full["categories"]]
    assert (
        len((await call(database, company, "lookup", {"ids": ids, "filters": {"categories": cats}}))["products"]) == 1
    )


async def test_lookup_available_filter_keeps_variants_by_stock(database, company):
    body = await call(database, company, "lookup", {"ids": ["roses-garden"], "filters": {"available": False}})
    (product,) = body["products"]
    assert [v["id"] for v in product["variants"]] == ["roses_garden_peach_std"]
    assert product["variants"][0]["availability"]["available"] is False


async def test_get_product_filters_narrow_the_variants(database, company):
    full = (await call(database, company, "get_product", {"id": "roses-red"}))["product"]
    price = {v["id"]: v["price"]["amount"] for v in full["variants"]}
    cheapest = min(price, key=price.get)
    dearer = {"price": {"min": price[cheapest] + 1}}
    body = await call(database, company, "get_product", {"id": "roses-red", "filters": dearer})
    got = [v["id"] for v in body["product"]["variants"]]
    assert cheapest not in got and set(got) == set(price) - {cheapest}
    labels = {val["label"] for opt in body["product"]["options"] for val in opt["values"]}
    assert labels == {o["label"] for v in body["product"]["variants"] for o in v["options"]}
    for data in ({"id": cheapest, "filters": dearer}, {"id": "roses-red", "filters": {"categories": ["No Such"]}}):
        missing = await call(database, company, "get_product", data)
        assert missing["ucp"]["status"] == "error" and missing["messages"][0]["code"] == "not_found"
        assert "filters" in missing["messages"][0]["content"]


@pytest.mark.parametrize("op", ["search", "lookup", "get_product"])
@pytest.mark.parametrize(
    "filters", [{"fulfills_to": {"address_country": "US"}}, {"price": {"min": -1}}, {"categories": [3]}, []]
)
async def test_a_filter_the_shop_does_not_apply_is_refused_naming_it(database, company, op, filters):
    data = {"search": {"query": "roses"}, "lookup": {"ids": ["roses-red"]}, "get_product": {"id": "roses-red"}}[op]
    with pytest.raises(BadRequest) as exc:
        await call(database, company, op, {**data, "filters": filters})
    assert exc.value.code == "invalid_request" and "$.filters" in exc.value.message


async def test_relevance_ranks_a_bounded_candidate_set_and_its_pages_walk_it_once(database):
    """A word in more products than RANK_CANDIDATES: the answer comes from that many matches, and
    its cursor pages walk exactly those, each once (a page never repeats or skips a candidate)."""
    from ucp_gateway.commerce.catalog_cli import import_items
    from ucp_gateway.commerce.catalog_feed import CSV_HEADER, parse_feed
    from ucp_gateway.commerce.catalog_search import RANK_CANDIDATES

    shop = await create_company(database.pool, slug="many-roses", display_name="Roses", hostnames=("roses.example",))
    lines = [",".join(CSV_HEADER)]
    for i in range(RANK_CANDIDATES + 30):
        row = dict.fromkeys(CSV_HEADER, "")
        row.update(product_id=f"r{i}", title=f"Rose bunch {i}", sku=f"R{i}", price=str(1000 + i), stock="3")
        lines.append(",".join(row[c] for c in CSV_HEADER))
    items, errors = parse_feed(("\n".join(lines) + "\n").encode(), "csv")
    assert not errors
    await import_items(database, shop.id, items)
    seen: list[str] = []
    body = {"query": "roses", "pagination": {"limit": 40}}
    while True:
        page = await call(database, shop, "search", body)
        seen += [p["id"] for p in page["products"]]
        if not page["pagination"]["has_next_page"]:
            break
        body = {"query": "roses", "pagination": {"limit": 40, "cursor": page["pagination"]["cursor"]}}
    assert len(seen) == len(set(seen)) == RANK_CANDIDATES

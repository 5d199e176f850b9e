"""The term path of catalog search (migrations 0068, 0121): catalog_terms follows every product's
search document and its field weights through inserts, edits and deletes, never for a price or
stock refresh; a query of plain words finds exactly what the GIN index's websearch match finds, in
the same relevance order as the GIN path gives other queries; one company's terms are invisible to
another. On the app role (RLS)."""

from __future__ import annotations

import random

import pytest

from ucp_gateway.commerce import catalog_service
from ucp_gateway.commerce.catalog_cli import import_items
from ucp_gateway.commerce.catalog_feed import CSV_HEADER, parse_feed
from ucp_gateway.commerce.catalog_search import RANK_CANDIDATES, term_words
from ucp_gateway.db import tenant_tx
from ucp_gateway.tenancy import create_company

from .test_catalog_search import ctx_for

WORDS = "rose tulip lily orchid peony daisy red white pink yellow bouquet basket wedding birthday".split()


def _feed(n: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    lines = [",".join(CSV_HEADER)]
    for i in range(n):
        row = dict.fromkeys(CSV_HEADER, "")
        title = " ".join(rnd.sample(WORDS, 3))
        row.update(product_id=f"t{i}", title=title, description=" ".join(rnd.sample(WORDS, 4)),
                   sku=f"T{i}", price=str(500 + 10 * i), stock=str(rnd.choice((0, 4))))  # fmt: skip
        lines.append(",".join(row[c] for c in CSV_HEADER))
    return ("\n".join(lines) + "\n").encode()


async def _shop(database, slug: str, n: int, seed: int):
    shop = await create_company(database.pool, slug=slug, display_name=slug, hostnames=(f"{slug}.example",))
    items, errors = parse_feed(_feed(n, seed), "csv")
    assert not errors
    await import_items(database, shop.id, items)
    return shop


async def _search_ids(database, shop, query: str, **extra) -> list[str]:
    ids: list[str] = []
    body = {"query": query, "pagination": {"limit": 50}, **extra}
    while True:
        async with tenant_tx(database.pool, shop.id) as conn:
            page = (await catalog_service.search(conn, ctx_for(shop), body)).body
        ids += [p["id"] for p in page["products"]]
        if not page["pagination"]["has_next_page"]:
            return ids
        body = dict(body, pagination={"limit": 50, "cursor": page["pagination"]["cursor"]})


WEIGHT = {"A": 10, "B": 4, "C": 2, "D": 1}  # title; tags, categories, brand, variants; description


async def _gin_ranked(database, shop, query: str, where: str = "true") -> list[str]:
    """The definition, computed here from the tsvectors: every websearch match, by the sum over the
    query's lexemes of the best field weight each has in the product, ties by id."""
    async with tenant_tx(database.pool, shop.id) as conn:
        lexemes = set(await conn.fetchval("SELECT tsvector_to_array(to_tsvector('english', $1))", query))
        rows = await conn.fetch(
            "SELECT id, (SELECT array_agg(array[u.lexeme, array_to_string(u.weights, '')]) FROM unnest(p.search) u)"
            " AS terms FROM catalog_products p, websearch_to_tsquery('english', $1) tsq"
            f" WHERE p.search @@ tsq AND p.min_price IS NOT NULL AND {where}",
            query,
        )

    def rank(terms) -> int:
        return sum(max(WEIGHT[w] for w in (labels or "D")) for lexeme, labels in terms if lexeme in lexemes)

    return [r["id"] for r in sorted(rows, key=lambda r: (-rank(r["terms"]), r["id"]))]


@pytest.mark.parametrize(
    ("text", "words"),
    [("red roses", 2), ("Roses", 1), ("a b c d e f", 6), ("a b c d e f g", 0), ("roses OR lilies", 0),
     ('"red roses"', 0), ("-white roses", 0), ("get-well", 3), ("get-well red", 4), ("get--well", 0),
     ("well-", 0), ("a-b-c-d-e-f", 0), ("roses 12", 0), ("rosé", 1), ("", 0), ("get-12", 0)],
)  # fmt: skip
def test_term_words_takes_only_plain_conjunctions(text, words):
    assert term_words(text) == words


async def test_plain_words_find_exactly_the_websearch_matches_in_rank_order(database):
    shop = await _shop(database, "terms-equal", 60, seed=5)
    queries = ["rose", "red roses", "pink tulips wedding", "white lily basket birthday", "the roses",
               "orchid orchids", "daisies peonies", "nothingmatches", "the"]  # fmt: skip
    for query in queries:
        assert term_words(query), query
        expected = await _gin_ranked(database, shop, query)
        assert len(expected) <= RANK_CANDIDATES
        assert await _search_ids(database, shop, query) == expected, query
    cheap = await _search_ids(database, shop, "red roses", filters={"price": {"max": 800}, "available": True})
    assert cheap == await _gin_ranked(database, shop, "red roses", "p.min_price <= 800 AND p.available")
    for query in ("roses OR lilies", "-white roses", "roses, lilies", "daisy; bouquet!"):
        assert not term_words(query), query  # the GIN path ranks by the same definition
        expected = await _gin_ranked(database, shop, query)
        assert expected, query
        assert await _search_ids(database, shop, query) == expected[:RANK_CANDIDATES], query


async def test_hyphenated_words_take_the_term_path_with_the_exact_phrase(database):
    shop = await create_company(database.pool, slug="terms-hyphen", display_name="H", hostnames=("th.example",))
    titles = ["Get-well roses", "Get well lilies", "Well get-well soon", "Mothers-day tulips", "Mother day posy",
              "Roses for mothers-day and get-well", "Day of the mothers", "Get-well-soon basket"]  # fmt: skip
    rows = [dict.fromkeys(CSV_HEADER, "") | {"product_id": f"h{i}", "title": t, "sku": f"H{i}", "price": "500",
            "stock": "2"} for i, t in enumerate(titles)]  # fmt: skip
    feed = "\n".join(",".join(r[c] for c in CSV_HEADER) for r in [dict(zip(CSV_HEADER, CSV_HEADER)), *rows])
    items, errors = parse_feed((feed + "\n").encode(), "csv")
    assert not errors
    await import_items(database, shop.id, items)
    for query in ("get-well", "get-well roses", "mothers-day", "mothers-day tulips", "get-well-soon", "well-get"):
        assert term_words(query), query
        expected = await _gin_ranked(database, shop, query)
        if expected:  # (no match: the typo fallback answers, checked elsewhere)
            assert await _search_ids(database, shop, query) == expected, query
    assert set(await _search_ids(database, shop, "get-well")) == {"h0", "h2", "h5"}  # not "get-well-soon"
    assert await _search_ids(database, shop, "mothers-day tulips") == ["h3"]


async def test_a_title_that_names_the_words_outranks_tags_and_descriptions(database):
    shop = await create_company(database.pool, slug="terms-weights", display_name="W", hostnames=("tw.example",))
    rows = [dict.fromkeys(CSV_HEADER, "") | r for r in (
        {"product_id": "desc", "title": "Posy", "description": "red roses"},
        {"product_id": "tags", "title": "Posy", "tags": "red|roses"},
        {"product_id": "half", "title": "Red posy", "description": "roses"},
        {"product_id": "title", "title": "Red roses"},
    )]  # fmt: skip
    for i, r in enumerate(rows):
        r.update(sku=f"W{i}", price="500", stock="3")
    feed = "\n".join(",".join(r[c] for c in CSV_HEADER) for r in [dict(zip(CSV_HEADER, CSV_HEADER)), *rows])
    items, errors = parse_feed((feed + "\n").encode(), "csv")
    assert not errors
    await import_items(database, shop.id, items)
    order = ["title", "half", "tags", "desc"]  # 10+10, 10+2, 4+4, 2+2
    assert await _search_ids(database, shop, "red roses") == order  # term path
    assert await _search_ids(database, shop, "red roses -lilies") == order  # GIN path, same weights


async def test_terms_follow_edits_prices_stock_and_deletes_and_nothing_else(database):
    shop = await _shop(database, "terms-follow", 5, seed=9)
    terms = "SELECT lexeme, min_price, available, xmin::text FROM catalog_terms WHERE product_id = $1 ORDER BY 1"
    variant = "SELECT id FROM products WHERE product_id = $1"
    async with tenant_tx(database.pool, shop.id) as conn:
        await conn.execute("UPDATE catalog_products SET title = 'Sunflower crate' WHERE id = 't0'")
        assert (
            await conn.fetchval("SELECT count(*) FROM catalog_terms WHERE product_id = 't0' AND lexeme = 'crate'") == 1
        )
        await conn.execute(
            "UPDATE inventory SET quantity = 4 WHERE product_id = ($1)", await conn.fetchval(variant, "t1")
        )
        before = await conn.fetch(terms, "t1")
        await conn.execute(
            "UPDATE inventory SET quantity = 9 WHERE product_id = $1", await conn.fetchval(variant, "t1")
        )
        assert await conn.fetch(terms, "t1") == before and before  # still in stock: not rewritten
        await conn.execute("UPDATE products SET price = 7 WHERE product_id = 't1'")
        await conn.execute(
            "UPDATE inventory SET quantity = 0 WHERE product_id = $1", await conn.fetchval(variant, "t1")
        )
        after = await conn.fetch(terms, "t1")
        assert [r["lexeme"] for r in after] == [r["lexeme"] for r in before]
        assert {(r["min_price"], r["available"]) for r in after} == {(7, False)}
        await conn.execute("DELETE FROM catalog_products WHERE id = 't2'")
        assert await conn.fetchval("SELECT count(*) FROM catalog_terms WHERE product_id = 't2'") == 0
        expected = await conn.fetchval(
            "SELECT count(*) FROM catalog_products p, unnest(tsvector_to_array(p.search)) l JOIN catalog_terms t"
            " ON t.lexeme = l WHERE t.product_id = p.id AND t.company_id = p.company_id"
            " AND (t.min_price, t.max_price, t.currency, t.available) IS NOT DISTINCT FROM"
            " (p.min_price, p.max_price, p.currency, p.available)"
            " AND t.weight = catalog_term_weight((SELECT u.weights FROM unnest(p.search) u WHERE u.lexeme = l))"
        )
        assert await conn.fetchval("SELECT count(*) FROM catalog_terms") == expected
    assert await _search_ids(database, shop, "sunflower crate") == ["t0"]
    assert await _gin_ranked(database, shop, "crate") == ["t0"]
    for filters, where in (({"available": True}, "p.available"), ({"price": {"max": 100}}, "p.min_price <= 100")):
        for word in WORDS:
            assert await _search_ids(database, shop, word, filters=filters) == await _gin_ranked(
                database, shop, word, where
            ), (word, filters)


async def test_another_company_sees_none_of_the_terms(database):
    shop = await _shop(database, "terms-mine", 10, seed=3)
    other = await create_company(database.pool, slug="terms-other", display_name="O", hostnames=("to.example",))
    async with tenant_tx(database.pool, other.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM catalog_terms") == 0
        assert (await catalog_service.search(conn, ctx_for(other), {"query": "roses"})).body["products"] == []
    async with database.pool.acquire() as conn:  # the app role without a tenant
        assert await conn.fetchval("SELECT count(*) FROM catalog_terms") == 0
    assert await _search_ids(database, shop, "roses")


async def test_an_import_leaves_the_planner_statistics_of_its_terms(database):
    """Planned as if catalog_terms were empty, a two-word search joined the term lists by scanning
    them whole (100 times the index entries): an import ends with ANALYZE of what it wrote."""
    from ucp_gateway.db.database import owner_connect

    owner = await owner_connect(database.owner_dsn)
    try:
        reltuples = "SELECT reltuples FROM pg_class WHERE oid = 'catalog_terms'::regclass"
        before = max(await owner.fetchval(reltuples), 0)
        shop = await _shop(database, "terms-analyzed", 40, seed=2)
        async with tenant_tx(database.pool, shop.id) as conn:
            mine = await conn.fetchval("SELECT count(*) FROM catalog_terms")
        assert mine > 100
        assert await owner.fetchval(reltuples) >= before + 0.9 * mine
    finally:
        await owner.close()

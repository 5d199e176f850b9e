"""asyncpg repository of the searchable catalogue (migration 0065). Thin: SQL only, no policy.

Every function takes a connection inside ``tenant_tx`` (RLS scopes it to one company). Rows come
back as plain dicts with the product's variants (``variants``: list of dicts, position order, each
with its ``stock``) so :mod:`.catalog_api` renders them without another query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from .catalog_feed import FeedError, FeedItem

__all__ = [
    "SearchQuery",
    "export_rows",
    "get_rows",
    "lookup_rows",
    "search_features",
    "search_rows",
    "upsert_items",
]

_VARIANTS = (
    "(SELECT coalesce(json_agg(json_build_object('id', v.id, 'title', v.title, 'price', v.price,"
    " 'currency', v.currency, 'list_price', v.list_price, 'sku', v.sku, 'gtin', v.gtin, 'options', v.options,"
    " 'image_url', v.image_url, 'stock', coalesce(i.quantity, 0)) ORDER BY v.position, v.id), '[]')"
    " FROM products v LEFT JOIN inventory i ON i.company_id = v.company_id AND i.product_id = v.id"
    " WHERE v.company_id = p.company_id AND v.product_id = p.id) AS variants"
)
_PRODUCT_COLUMNS = (
    "p.id, p.handle, p.title, p.description, p.brand, p.categories, p.tags, p.media, p.min_price, p.max_price,"
    " p.currency, p.available, p.created_at, " + _VARIANTS
)


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A validated search (catalog_api.parse_search). Money in minor units of ``currency``.

    ``sort``: relevance | price_asc | price_desc | title | newest. ``after``: the keyset of the last
    row of the previous page (``[sort value, id]``), None on the first page. ``fuzzy``: match word
    prefixes (the typo fallback); ``trgm``: rank by title trigram similarity (pg_trgm present).
    """

    text: str | None
    categories: tuple[str, ...] = ()
    price_min: int | None = None
    price_max: int | None = None
    currency: str | None = None
    available: bool | None = None
    sort: str = "relevance"
    limit: int = 10
    after: tuple[Any, str] | None = None
    fuzzy: bool = False
    trgm: bool = False


# sort -> (key expression, direction). Ties break on id ascending; relevance and price_desc
# compare their key descending.
_SORTS = {
    "relevance": ("ts_rank_cd(p.search, {tsq}, 1)::float8", "DESC"),
    "trgm": ("similarity(lower(p.title), lower($2::text))::float8", "DESC"),
    "price_asc": ("p.min_price", "ASC"),
    "price_desc": ("p.min_price", "DESC"),
    "title": ("lower(p.title)", "ASC"),
    "newest": ("p.created_at", "DESC"),
}


def _tsquery(text: str, fuzzy: bool) -> tuple[str, str]:
    """``(SQL expression over $2, the parameter)``: websearch syntax, or (the typo fallback without
    pg_trgm) the first half of each word, at least 3 letters, as a prefix: ``tulpis`` -> ``tul:*``."""
    if not fuzzy:
        return "websearch_to_tsquery('english'::regconfig, $2::text)", text
    words = [w for w in "".join(c if c.isalnum() else " " for c in text.lower()).split() if w][:8]
    prefixes = [w[: max(3, len(w) // 2)] for w in words]
    return "to_tsquery('english'::regconfig, $2::text)", " & ".join(f"{p}:*" for p in prefixes) or "''"


# The planner prices a LIMIT of candidates by interpolation, as if the matches were spread evenly
# along any order it can walk: for a match of some hundreds of rows it chose a sequential scan or
# a walk of the price index that stops early, and read thousands of pages to find 100 matches
# (1,966 and 4,348 buffers; a lower random_page_cost only moved the walk from one to the other). The
# GIN bitmap is right for every text query (a very common word: its first pages in TID order), so
# the candidate statement is planned with bitmap scans only, and the defaults come back after it:
# over 150 filtered searches at 100,000 products the most buffers one took went from 1,966 to 759.
_BITMAP_ONLY = "SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off"
_PLANNER_DEFAULTS = "SET LOCAL enable_seqscan = DEFAULT; SET LOCAL enable_indexscan = DEFAULT"
#: At most this many matches are ranked per relevance query (see search_rows; docs/catalog.md).
RANK_CANDIDATES = 100


async def search_rows(conn: asyncpg.Connection, q: SearchQuery) -> list[dict[str, Any]]:
    """One page (``q.limit + 1`` rows: the extra one says there is a next page) in one statement.
    Each row has ``sort_key`` (the keyset value for the next cursor).

    Relevance: the filters and the text match select at most :data:`RANK_CANDIDATES` products (in
    the index's order), which are ranked; a query that matches more (one common word over 100,000
    products) is answered from those, so its cost stays bounded (ranking every match of a word in
    20 % of a large catalogue took longer than the whole request budget). Cursor pages of one
    query walk the same candidates. Other sorts walk every match in their index order."""
    sort = "trgm" if q.trgm else q.sort
    if q.text is None and sort == "relevance":
        sort = "title"
    key, direction = _SORTS[sort]
    args: list[Any] = [q.limit + 1]
    where = []
    # the tsquery is written in place (no CTE): the planner then sees a constant it can look up in
    # the GIN index, where a CTE's value is unknown to it and the match becomes a scan of the company
    if q.trgm:
        qparam = q.text
        where.append("lower(p.title) % lower($2::text)")
    elif q.text is not None:
        tsq, qparam = _tsquery(q.text, q.fuzzy)
        key = key.format(tsq=tsq)
        where.append(f"p.search @@ {tsq}")
    else:
        qparam = None  # browse by filters ($2 unused but typed)
        where.append("$2::text IS NULL")
    args.append(qparam)

    def arg(v: Any) -> str:
        args.append(v)
        return f"${len(args)}"

    where.append("p.min_price IS NOT NULL")  # a product without variants is not sold
    keyset: list[str] = []
    if q.categories:
        where.append(f"p.categories && {arg(list(q.categories))}::text[]")
    if q.currency is not None and (q.price_min is not None or q.price_max is not None):
        where.append(f"p.currency = {arg(q.currency)}")
    if q.price_min is not None:
        where.append(f"p.max_price >= {arg(q.price_min)}")
    if q.price_max is not None:
        where.append(f"p.min_price <= {arg(q.price_max)}")
    if q.available is not None:
        where.append(f"p.available = {arg(q.available)}")
    if q.after is not None:
        op = "<" if direction == "DESC" else ">"
        cast = {"newest": "::timestamptz", "title": "::text"}.get(sort, "")
        if sort in ("relevance", "trgm"):
            cast = "::float8"
        elif sort in ("price_asc", "price_desc"):
            cast = "::bigint"
        k, i = arg(q.after[0]), arg(q.after[1])
        kx = "p.sort_key" if sort in ("relevance", "trgm") else key  # the ranked candidates carry theirs
        keyset.append(f"({kx} {op} {k}{cast} OR ({kx} = {k}{cast} AND p.id > {i}::text))")
    if sort in ("relevance", "trgm"):  # rank at most RANK_CANDIDATES matches (see the docstring)
        # ids and ranks only are carried through the ranking; the page's rows are read after it
        sql = (
            f"WITH m AS MATERIALIZED (SELECT p.id, {key} AS sort_key FROM catalog_products p"
            f" WHERE {' AND '.join(where)} LIMIT {RANK_CANDIDATES}),"
            f" top AS (SELECT * FROM m p{' WHERE ' + ' AND '.join(keyset) if keyset else ''}"
            f" ORDER BY p.sort_key {direction}, p.id LIMIT $1)"
            f" SELECT {_PRODUCT_COLUMNS}, top.sort_key FROM top JOIN catalog_products p ON p.id = top.id"
            f" ORDER BY top.sort_key {direction}, p.id"
        )
        await conn.execute(_BITMAP_ONLY)
        rows = await conn.fetch(sql, *args)
        await conn.execute(_PLANNER_DEFAULTS)  # (an error aborts the transaction: its SET LOCAL goes too)
        return [dict(r) for r in rows]
    else:
        sql = (
            f"SELECT {_PRODUCT_COLUMNS}, {key} AS sort_key FROM catalog_products p"
            f" WHERE {' AND '.join(where + keyset)} ORDER BY {key} {direction}, p.id LIMIT $1"
        )
    return [dict(r) for r in await conn.fetch(sql, *args)]


# lookup: every id is tried as product id, handle, variant id, SKU and GTIN, in one statement
_LOOKUP = (
    "WITH inp AS (SELECT DISTINCT unnest($1::text[]) AS input),"
    " hits AS ("
    "  SELECT inp.input, v.product_id, v.id AS variant_id FROM inp JOIN products v ON v.id = inp.input"
    "   WHERE v.product_id IS NOT NULL"
    "  UNION SELECT inp.input, v.product_id, v.id FROM inp JOIN products v ON v.sku = inp.input"
    "   WHERE v.product_id IS NOT NULL"
    "  UNION SELECT inp.input, v.product_id, v.id FROM inp JOIN products v ON v.gtin = inp.input"
    "   WHERE v.product_id IS NOT NULL"
    "  UNION SELECT inp.input, c.id, NULL FROM inp JOIN catalog_products c ON c.id = inp.input"
    "  UNION SELECT inp.input, c.id, NULL FROM inp JOIN catalog_products c ON c.handle = inp.input)"
    " SELECT " + _PRODUCT_COLUMNS + ","
    " (SELECT json_agg(json_build_object('input', h.input, 'variant_id', h.variant_id))"
    "   FROM hits h WHERE h.product_id = p.id) AS hits"
    " FROM catalog_products p WHERE p.id IN (SELECT product_id FROM hits) ORDER BY p.id LIMIT $2"
)


async def lookup_rows(conn: asyncpg.Connection, ids: Sequence[str], *, cap: int) -> list[dict[str, Any]]:
    """Products matching any of ``ids`` (product id, handle, variant id, SKU, GTIN), at most ``cap``,
    each with ``hits``: ``[{input, variant_id|None}]`` (None: the product itself was named)."""
    return [dict(r) for r in await conn.fetch(_LOOKUP, list(ids), cap)]


_GET = (
    "SELECT " + _PRODUCT_COLUMNS + ", $1::text AS input FROM catalog_products p"
    " WHERE p.id = $1 OR p.id = (SELECT product_id FROM products WHERE id = $1)"
    " OR p.handle = $1 LIMIT 1"
)


async def get_rows(conn: asyncpg.Connection, id_: str) -> dict[str, Any] | None:
    """The product named by a product id, variant id or handle, or None."""
    row = await conn.fetchrow(_GET, id_)
    return None if row is None else dict(row)


async def export_rows(conn: asyncpg.Connection, *, after: str = "", batch: int = 500) -> list[dict[str, Any]]:
    """The next ``batch`` products after id ``after`` (id order), for feeds."""
    sql = f"SELECT {_PRODUCT_COLUMNS} FROM catalog_products p WHERE p.id > $1 ORDER BY p.id LIMIT $2"
    return [dict(r) for r in await conn.fetch(sql, after, batch)]


async def search_features(conn: asyncpg.Connection) -> tuple[bool, bool]:
    """``(pg_trgm installed, ts_match_vq LEAKPROOF)`` in this database: typo tolerance by trigrams
    (migration 0065 installs pg_trgm when available), and whether a text match can be a GIN index
    condition under row-level security (migration 0067 marks it when a superuser migrates)."""
    row = await conn.fetchrow(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') AS trgm,"
        " (SELECT proleakproof FROM pg_proc WHERE oid = 'ts_match_vq(tsvector, tsquery)'::regprocedure) AS gin"
    )
    return bool(row["trgm"]), bool(row["gin"])


def _products_json(items: Sequence[FeedItem]) -> list[dict[str, Any]]:
    first: dict[str, FeedItem] = {}
    for it in items:
        first.setdefault(it.product_id, it)
    return [
        {
            "id": it.product_id,
            "handle": it.handle,
            "title": it.title,
            "description": it.description,
            "brand": it.brand,
            "categories": list(it.categories),
            "tags": list(it.tags),
            "media": [{"type": "image", "url": u} for u in it.media],
        }
        for it in first.values()
    ]


def _variants_json(items: Sequence[FeedItem], positions: dict[str, int]) -> list[dict[str, Any]]:
    return [
        {
            "id": it.variant_id,
            "product_id": it.product_id,
            "title": it.variant_title,
            "price": it.price,
            "currency": it.currency,
            "image_url": it.media[0] if it.media else None,
            "sku": it.sku,
            "gtin": it.gtin,
            "options": [{"name": n, "label": v} for n, v in it.options],
            "list_price": it.list_price,
            "position": positions[it.variant_id],
            "stock": it.stock,
        }
        for it in items
    ]


# A new product is written with what catalog_refresh derives from its variants (computed here from
# the batch's variants, $3, as catalog_refresh computes it), so the refresh after the batch finds it
# equal and leaves it: each new row is written once, not inserted and then rewritten (which left
# half of an imported table dead space and put each tsvector into the GIN index twice).
_UPSERT_PRODUCTS = (
    "WITH agg AS (SELECT v.product_id, min(v.price) AS min_price, max(v.price) AS max_price,"
    "   min(v.currency) AS currency, bool_or(coalesce(v.stock, 0) > 0) AS available"
    "  FROM jsonb_to_recordset($3::jsonb) AS v(product_id text, price bigint, currency text, stock int)"
    "  GROUP BY v.product_id),"
    " txt AS (SELECT v.product_id, string_agg(DISTINCT o->>'label', ' ') AS variant_text"
    "  FROM jsonb_to_recordset($3::jsonb) AS v(product_id text, options jsonb), jsonb_array_elements(v.options) o"
    "  GROUP BY v.product_id)"
    " INSERT INTO catalog_products AS c (company_id, id, handle, title, description, brand, categories, tags, media,"
    "  min_price, max_price, currency, available, variant_text)"
    " SELECT $1, r.id, r.handle, r.title, r.description, r.brand, r.categories, r.tags, r.media,"
    "  agg.min_price, agg.max_price, agg.currency, coalesce(agg.available, false), coalesce(txt.variant_text, '')"
    " FROM jsonb_to_recordset($2::jsonb) AS r(id text, handle text, title text, description text, brand text,"
    "   categories text[], tags text[], media jsonb)"
    " LEFT JOIN agg ON agg.product_id = r.id LEFT JOIN txt ON txt.product_id = r.id"
    " ON CONFLICT (company_id, id) DO {action}"
    " RETURNING (xmax = 0) AS inserted"
)
_PRODUCTS_UPDATE = (
    "UPDATE SET handle = EXCLUDED.handle, title = EXCLUDED.title, description = EXCLUDED.description,"
    " brand = EXCLUDED.brand, categories = EXCLUDED.categories, tags = EXCLUDED.tags, media = EXCLUDED.media"
    " WHERE (c.handle, c.title, c.description, c.brand, c.categories, c.tags, c.media) IS DISTINCT FROM"
    " (EXCLUDED.handle, EXCLUDED.title, EXCLUDED.description, EXCLUDED.brand, EXCLUDED.categories,"
    "  EXCLUDED.tags, EXCLUDED.media)"
)
_UPSERT_VARIANTS = (
    "INSERT INTO products AS p (company_id, id, product_id, title, price, currency, image_url, sku, gtin, options,"
    "  list_price, position)"
    " SELECT $1, r.id, r.product_id, r.title, r.price, r.currency, r.image_url, r.sku, r.gtin, r.options,"
    "  r.list_price, r.position"
    " FROM jsonb_to_recordset($2::jsonb) AS r(id text, product_id text, title text, price bigint, currency text,"
    "   image_url text, sku text, gtin text, options jsonb, list_price bigint, position int)"
    " ON CONFLICT (company_id, id) DO {action}"
    " RETURNING (xmax = 0) AS inserted"
)
_VARIANTS_UPDATE = (
    "UPDATE SET product_id = EXCLUDED.product_id, title = EXCLUDED.title, price = EXCLUDED.price,"
    " currency = EXCLUDED.currency, image_url = EXCLUDED.image_url, sku = EXCLUDED.sku, gtin = EXCLUDED.gtin,"
    " options = EXCLUDED.options, list_price = EXCLUDED.list_price, position = EXCLUDED.position"
    " WHERE (p.product_id, p.title, p.price, p.currency, p.image_url, p.sku, p.gtin, p.options, p.list_price,"
    "  p.position) IS DISTINCT FROM (EXCLUDED.product_id, EXCLUDED.title, EXCLUDED.price, EXCLUDED.currency,"
    "  EXCLUDED.image_url, EXCLUDED.sku, EXCLUDED.gtin, EXCLUDED.options, EXCLUDED.list_price, EXCLUDED.position)"
)
# keep mode (the demo seed): an existing item keeps its title, price and stock; it only joins its
# product when it has none yet, or only the one-item product migration 0065 gave it
_VARIANTS_ADOPT = (
    "UPDATE SET product_id = EXCLUDED.product_id, sku = EXCLUDED.sku, gtin = EXCLUDED.gtin,"
    " options = EXCLUDED.options, list_price = EXCLUDED.list_price, position = EXCLUDED.position"
    " WHERE p.product_id IS NULL OR (p.product_id = p.id AND EXCLUDED.product_id <> p.id)"
)
_UPSERT_STOCK = (
    "INSERT INTO inventory AS i (company_id, product_id, quantity)"
    " SELECT $1, r.id, coalesce(r.stock, 0) FROM jsonb_to_recordset($2::jsonb) AS r(id text, stock int)"
    " ON CONFLICT (company_id, product_id) DO {action} RETURNING 1"
)


async def upsert_items(
    conn: asyncpg.Connection, company_id: Any, items: Sequence[FeedItem], *, keep: bool = False
) -> tuple[dict[str, int], list[FeedError]]:
    """Write one batch (the caller's transaction): products, variants, stock. Idempotent by SKU:
    a SKU names one variant id for ever; a line whose SKU is another variant's is an error, and so
    is one whose variant belongs to another product's SKU. Rows equal to what is stored are not
    rewritten (a second import of the same feed changes nothing).

    ``keep`` (the demo seed): existing products, variants and stock are left as they are.
    Returns ``({products_inserted, products_updated, variants_inserted, variants_updated,
    stock_set}, line errors)``. Raises asyncpg errors for what the pre-checks cannot see (the
    caller retries the lines one by one to name the bad one).
    """
    errors: list[FeedError] = []
    skus = {it.sku: it for it in items}
    owners = {
        r["sku"]: r["id"]
        for r in await conn.fetch("SELECT sku, id FROM products WHERE sku = ANY($1::text[])", list(skus))
    }
    handles = {
        r["handle"]: r["id"]
        for r in await conn.fetch(
            "SELECT handle, id FROM catalog_products WHERE handle = ANY($1::text[])", list({i.handle for i in items})
        )
    }
    good: list[FeedItem] = []
    batch_handles: dict[str, str] = {}
    for it in items:
        if owners.get(it.sku, it.variant_id) != it.variant_id:
            errors.append(FeedError(it.line, f"sku {it.sku!r} belongs to variant {owners[it.sku]!r}"))
        elif handles.get(it.handle, it.product_id) != it.product_id or (
            batch_handles.setdefault(it.handle, it.product_id) != it.product_id
        ):
            errors.append(FeedError(it.line, f"handle {it.handle!r} belongs to another product"))
        else:
            good.append(it)
    positions: dict[str, int] = {}
    per_product: dict[str, int] = {}
    for it in good:
        positions[it.variant_id] = per_product.get(it.product_id, 0)
        per_product[it.product_id] = positions[it.variant_id] + 1
    counts = dict.fromkeys(
        ("products_inserted", "products_updated", "variants_inserted", "variants_updated", "stock_set"), 0
    )
    if not good:
        return counts, errors
    old_parents = {  # a variant that moves leaves its old product to be refreshed too
        r["product_id"]
        for r in await conn.fetch(
            "SELECT DISTINCT product_id FROM products WHERE id = ANY($1::text[]) AND product_id IS NOT NULL",
            [it.variant_id for it in good],
        )
    }
    # the triggers' per-statement refreshes are deferred to one at the end (migration 0065)
    await conn.execute("SET LOCAL catalog.refresh = 'deferred'")
    variants = _variants_json(good, positions)
    rows = await conn.fetch(
        _UPSERT_PRODUCTS.format(action="NOTHING" if keep else _PRODUCTS_UPDATE),
        company_id,
        _products_json(good),
        variants,
    )
    counts["products_inserted"] = sum(r["inserted"] for r in rows)
    counts["products_updated"] = len(rows) - counts["products_inserted"]
    rows = await conn.fetch(
        _UPSERT_VARIANTS.format(action=_VARIANTS_ADOPT if keep else _VARIANTS_UPDATE), company_id, variants
    )
    counts["variants_inserted"] = sum(r["inserted"] for r in rows)
    counts["variants_updated"] = len(rows) - counts["variants_inserted"]
    stock = [{"id": v["id"], "stock": v["stock"]} for v in variants]
    given = [s for s in stock if s["stock"] is not None]
    action = (
        "NOTHING"
        if keep
        else "UPDATE SET quantity = EXCLUDED.quantity WHERE i.quantity IS DISTINCT FROM EXCLUDED.quantity"
    )
    counts["stock_set"] = len(await conn.fetch(_UPSERT_STOCK.format(action=action), company_id, given))
    missing = [s for s in stock if s["stock"] is None]  # a new variant without stock starts at 0
    if missing:
        await conn.execute(_UPSERT_STOCK.format(action="NOTHING"), company_id, missing)
    await conn.execute("SET LOCAL catalog.refresh = ''")
    await conn.execute("SELECT catalog_refresh($1::text[])", sorted(old_parents | {it.product_id for it in good}))
    if keep:  # the products migration 0065 made for items the seed has now regrouped
        await conn.execute(
            "DELETE FROM catalog_products c WHERE c.id = ANY($1::text[])"
            " AND NOT EXISTS (SELECT 1 FROM products v WHERE v.product_id = c.id)",
            [v["id"] for v in variants],
        )
    return counts, errors

"""asyncpg repository of the catalogue (migration 0065): lookups, feeds and the import's writes
(search: :mod:`.catalog_search`). Thin: SQL only, no policy.

Every function takes a connection inside ``tenant_tx`` (RLS scopes it to one company). Rows come
back as plain dicts with the product's variants (``variants``: list of dicts, position order, each
with its ``stock``) so :mod:`.catalog_api` renders them without another query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from .catalog_feed import FeedError, FeedItem

__all__ = ["PRODUCT_COLUMNS", "export_rows", "get_rows", "lookup_rows", "upsert_items"]

_VARIANTS = (
    "(SELECT coalesce(json_agg(json_build_object('id', v.id, 'title', v.title, 'price', v.price,"
    " 'currency', v.currency, 'list_price', v.list_price, 'sku', v.sku, 'gtin', v.gtin, 'options', v.options,"
    " 'image_url', v.image_url, 'stock', coalesce(i.quantity, 0)) ORDER BY v.position, v.id), '[]')"
    " FROM products v LEFT JOIN inventory i ON i.company_id = v.company_id AND i.product_id = v.id"
    " WHERE v.company_id = p.company_id AND v.product_id = p.id) AS variants"
)
PRODUCT_COLUMNS = (
    "p.id, p.handle, p.title, p.description, p.brand, p.categories, p.tags, p.media, p.min_price, p.max_price,"
    " p.currency, p.available, p.created_at, " + _VARIANTS
)


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
    " SELECT " + PRODUCT_COLUMNS + ","
    " (SELECT json_agg(json_build_object('input', h.input, 'variant_id', h.variant_id))"
    "   FROM hits h WHERE h.product_id = p.id) AS hits"
    " FROM catalog_products p WHERE p.id IN (SELECT product_id FROM hits) ORDER BY p.id LIMIT $2"
)


async def lookup_rows(conn: asyncpg.Connection, ids: Sequence[str], *, cap: int) -> list[dict[str, Any]]:
    """Products matching any of ``ids`` (product id, handle, variant id, SKU, GTIN), at most ``cap``,
    each with ``hits``: ``[{input, variant_id|None}]`` (None: the product itself was named)."""
    return [dict(r) for r in await conn.fetch(_LOOKUP, list(ids), cap)]


_GET = (
    "SELECT " + PRODUCT_COLUMNS + ", $1::text AS input FROM catalog_products p"
    " WHERE p.id = $1 OR p.id = (SELECT product_id FROM products WHERE id = $1)"
    " OR p.handle = $1 LIMIT 1"
)


async def get_rows(conn: asyncpg.Connection, id_: str) -> dict[str, Any] | None:
    """The product named by a product id, variant id or handle, or None."""
    row = await conn.fetchrow(_GET, id_)
    return None if row is None else dict(row)


async def export_rows(conn: asyncpg.Connection, *, after: str = "", batch: int = 500) -> list[dict[str, Any]]:
    """The next ``batch`` products after id ``after`` (id order), for feeds."""
    sql = f"SELECT {PRODUCT_COLUMNS} FROM catalog_products p WHERE p.id > $1 ORDER BY p.id LIMIT $2"
    return [dict(r) for r in await conn.fetch(sql, after, batch)]


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

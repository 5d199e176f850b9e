"""UCP catalog operations (imperative shell): search_catalog, lookup_catalog, get_product.

One call = reads in the caller's tenant transaction; each returns an :class:`Outcome` (HTTP 200:
catalog outcomes, not found included, are bodies; UCP catalog rest.md). Bad input raises
BadRequest (400) before anything is read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import asyncpg
import structlog

from . import catalog_search, catalog_store
from .catalog_api import next_cursor, parse_get, parse_lookup, parse_search
from .catalog_wire import lookup_products, product_detail, render_product
from .messages import error, info
from .service import UCP_VERSION, CommerceContext, Outcome

__all__ = ["CATALOG_LOOKUP", "CATALOG_SEARCH", "get_product", "lookup", "search"]

CATALOG_SEARCH = "dev.ucp.shopping.catalog.search"
CATALOG_LOOKUP = "dev.ucp.shopping.catalog.lookup"

# does the database have pg_trgm (migration 0065)? asked once per process (one database each),
# with whether text matches use the GIN index (migration 0067): a warning once when they cannot
_TRGM: list[bool] = []
_log = structlog.get_logger("ucp_gateway.commerce.catalog")


def catalog_ucp(ctx: CommerceContext, name: str) -> dict[str, Any]:
    """The response ``ucp`` of a catalog operation: the negotiated entry of ``name`` (the request's
    negotiation names the operation's root), else ours; no payment handlers (catalog responses)."""
    caps = ctx.shop.ucp.get("capabilities") or {}
    mine = {n: v for n, v in caps.items() if n == name or n.startswith(name + ".")}
    version = ctx.shop.ucp.get("version", UCP_VERSION)
    return {"version": version, "status": "success", "capabilities": mine or {name: [{"version": version}]}}


async def _trgm(conn: asyncpg.Connection) -> bool:
    if not _TRGM:
        trgm, gin = await catalog_search.search_features(conn)
        if not gin:
            _log.warning(
                "catalog_search_without_gin_index",
                reason="ts_match_vq is not LEAKPROOF (migrated by a non-superuser)",
                fix="a superuser runs once: ALTER FUNCTION ts_match_vq(tsvector, tsquery) LEAKPROOF",
            )
        _TRGM.append(trgm)
    return _TRGM[0]


async def search(conn: asyncpg.Connection, ctx: CommerceContext, data: Any) -> Outcome:
    """``POST /catalog/search`` (UCP catalog search.md): ranked full-text search with filters, sort
    and cursor pagination. When a query finds nothing on its first page, it is retried typo-tolerant
    (pg_trgm title similarity when the server has it, else word prefixes), said by an info message."""
    q = parse_search(data, shop_currency=ctx.currency)
    if not _TRGM:
        await _trgm(conn)  # the first search of the process asks what the database offers
    messages: list[dict[str, Any]] = []
    rows = await catalog_search.search_rows(conn, q)
    if not rows and q.text is not None and q.after is None and not (q.fuzzy or q.trgm) and q.sort == "relevance":
        fuzzy = replace(q, trgm=await _trgm(conn), fuzzy=True)
        rows = await catalog_search.search_rows(conn, fuzzy)
        if rows:
            q = fuzzy
            messages.append(info(f"No exact match for {q.text[:100]!r}; showing similar products.",
                                 code="fuzzy_match"))  # fmt: skip
    page, more = rows[: q.limit], len(rows) > q.limit
    body: dict[str, Any] = {
        "ucp": catalog_ucp(ctx, CATALOG_SEARCH),
        "products": [render_product(r, ctx.shop.base_url) for r in page],
        "pagination": {"has_next_page": more},
    }
    if more:
        body["pagination"]["cursor"] = next_cursor(q, page[-1])
    if messages:
        body["messages"] = messages
    return Outcome(200, body)


async def lookup(conn: asyncpg.Connection, ctx: CommerceContext, data: Any) -> Outcome:
    """``POST /catalog/lookup`` (UCP lookup.md): products by product id, variant id, SKU, GTIN or
    handle, one query, narrowed by ``filters`` after resolution; unknown ids are left out, each
    named by an info ``not_found`` message (an id whose variants the filters drop is left out
    without one: it is known, and not what was asked for)."""
    ids, filters = parse_lookup(data, shop_currency=ctx.currency)
    rows = await catalog_store.lookup_rows(conn, ids, cap=len(ids) * 2)
    products = lookup_products(rows, ctx.shop.base_url, filters)
    resolved = {h["input"] for r in rows if r["variants"] for h in r["hits"]}
    body: dict[str, Any] = {"ucp": catalog_ucp(ctx, CATALOG_LOOKUP), "products": products}
    missing = [i for i in ids if i not in resolved]
    if missing:
        body["messages"] = [info(i, code="not_found") for i in missing]
    return Outcome(200, body)


def _not_found(ctx: CommerceContext, content: str) -> Outcome:
    ucp = dict(catalog_ucp(ctx, CATALOG_LOOKUP), status="error")
    msg = error("not_found", content, severity="unrecoverable", path="$.id")
    return Outcome(200, {"ucp": ucp, "messages": [msg]})


async def get_product(conn: asyncpg.Connection, ctx: CommerceContext, data: Any) -> Outcome:
    """``POST /catalog/product`` (UCP lookup.md "Get Product"): one product with its options'
    availability relative to the selection, among the variants ``filters`` keep; unknown id: 200
    with ``ucp.status`` error and an unrecoverable ``not_found`` (agents must not retry it). A
    product (or named variant) the filters leave nothing of answers the same ``not_found``, saying so."""
    pid, selected, prefs, filters = parse_get(data, shop_currency=ctx.currency)
    row = await catalog_store.get_rows(conn, pid)
    if row is None or not row["variants"]:
        return _not_found(ctx, f"Product {pid[:200]!r} not found.")
    kept = filters.variants(row)
    named = any(v["id"] == row["input"] for v in row["variants"])
    if not kept or (named and not any(v["id"] == row["input"] for v in kept)):
        return _not_found(ctx, f"Product {pid[:200]!r} has no variant matching the filters.")
    detail = product_detail(dict(row, variants=kept), ctx.shop.base_url, selected, prefs)
    return Outcome(200, {"ucp": catalog_ucp(ctx, CATALOG_LOOKUP), "product": detail})

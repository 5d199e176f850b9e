"""UCP catalog search and lookup, the pure part: request parsing, the product and variant wire
shapes (types/product.json, types/variant.json), option selection for get_product, cursors.

Sources: UCP catalog search.md and lookup.md (S:shopping/catalog_search.json, catalog_lookup.json).
Money is integer minor units. Every parse function raises BadRequest (400 ``invalid_request``,
naming the field) for input the schema refuses; over-large lookups are ``request_too_large``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..cursors import decode_cursor, encode_cursor
from ..errors import BadRequest
from .catalog_search import SearchQuery

__all__ = [
    "FILTER_NAMES",
    "LOOKUP_MAX_IDS",
    "NO_FILTERS",
    "QUERY_MAX_LENGTH",
    "SEARCH_MAX_LIMIT",
    "SORTS",
    "Filters",
    "lookup_products",
    "next_cursor",
    "parse_filters",
    "parse_get",
    "parse_lookup",
    "parse_search",
    "product_detail",
    "render_product",
]

QUERY_MAX_LENGTH = 500  # characters; a longer query is refused, not cut (a cut query answers something else)
SEARCH_MAX_LIMIT = 50  # page size cap: larger limits are clamped silently (UCP: MAY clamp)
SEARCH_DEFAULT_LIMIT = 10
LOOKUP_MAX_IDS = 50  # more ids: request_too_large (UCP lookup.md: SHOULD accept at least 10)
SORTS = ("relevance", "price_asc", "price_desc", "title", "newest")
_CURRENCY = re.compile(r"[A-Z]{3}")
_MAX_AMOUNT = 10**12


class RequestTooLarge(BadRequest):
    code = "request_too_large"


def _obj(v: Any, path: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise BadRequest(f"{path} must be an object")
    return v


def _amount(v: Any, path: str) -> int:
    if type(v) is not int or not 0 <= v <= _MAX_AMOUNT:
        raise BadRequest(f"{path} must be an integer amount in minor units (0 to {_MAX_AMOUNT})")
    return v


def _text(v: Any, path: str, *, max_length: int = 200) -> str:
    if not isinstance(v, str) or not v or len(v) > max_length or not v.isprintable():
        raise BadRequest(f"{path} must be a non-empty printable string of at most {max_length} characters")
    return v


def _context_currency(data: Mapping[str, Any]) -> str | None:
    ctx = data.get("context")
    if ctx is None:
        return None
    cur = _obj(ctx, "$.context").get("currency")
    if cur is None:
        return None
    if not isinstance(cur, str) or not _CURRENCY.fullmatch(cur):
        raise BadRequest("$.context.currency must be an ISO 4217 code")
    return cur


@dataclass(frozen=True, slots=True)
class Filters:
    """Validated ``filters`` (S:shopping/types/search_filters.json, combined with AND): product
    ``categories`` (OR, exact ``value``), variant ``price_min``/``price_max`` in minor units of
    ``currency`` (the request's ``context.currency``, else the shop's), ``available`` (a gateway
    filter: the variant is, or is not, in stock). None: not filtered on."""

    categories: tuple[str, ...] = ()
    price_min: int | None = None
    price_max: int | None = None
    currency: str | None = None
    available: bool | None = None

    def product_passes(self, row: Mapping[str, Any]) -> bool:
        """Whether the product (a catalog_store row) is in one of the categories (if any)."""
        return not self.categories or bool(set(self.categories) & set(row["categories"] or ()))

    def variant_passes(self, v: Mapping[str, Any]) -> bool:
        """Whether one variant (a row of ``row["variants"]``) meets the price and stock filters; a
        price filter in another currency than the variant's matches nothing (no conversion)."""
        if self.price_min is not None or self.price_max is not None:
            if v["currency"].strip() != self.currency:
                return False
            if self.price_min is not None and v["price"] < self.price_min:
                return False
            if self.price_max is not None and v["price"] > self.price_max:
                return False
        return self.available is None or (v["stock"] > 0) == self.available

    def variants(self, row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The product's variants these filters keep (none when the product itself fails)."""
        if not self.product_passes(row):
            return []
        return [v for v in row["variants"] if self.variant_passes(v)]


NO_FILTERS = Filters()
FILTER_NAMES = ("categories", "price", "available")


def parse_filters(data: Mapping[str, Any], *, shop_currency: str) -> Filters:
    """``data["filters"]`` (absent or null: :data:`NO_FILTERS`) of a search, lookup or get_product
    request. UCP defines ``categories`` and ``price``; merchants MAY add custom filters, and ours
    is ``available``: any other name is refused (400, naming it) rather than silently ignored, so
    an agent never reads an unfiltered answer as a filtered one."""
    filters = data.get("filters")
    if filters is None:
        return NO_FILTERS
    filters = _obj(filters, "$.filters")
    unknown = sorted(set(filters) - set(FILTER_NAMES))
    if unknown:
        raise BadRequest(f"$.filters.{unknown[0]}: not a filter of this shop (it filters by {', '.join(FILTER_NAMES)})")
    cats: tuple[str, ...] = ()
    pmin = pmax = None
    available = None
    if filters.get("categories") is not None:
        c = filters["categories"]
        if not isinstance(c, list) or len(c) > 20:
            raise BadRequest("$.filters.categories must be an array of at most 20 strings")
        cats = tuple(_text(x, f"$.filters.categories[{i}]") for i, x in enumerate(c))
    if filters.get("price") is not None:
        price = _obj(filters["price"], "$.filters.price")
        if price.get("min") is not None:
            pmin = _amount(price["min"], "$.filters.price.min")
        if price.get("max") is not None:
            pmax = _amount(price["max"], "$.filters.price.max")
    if filters.get("available") is not None:
        if not isinstance(filters["available"], bool):
            raise BadRequest("$.filters.available must be a boolean")
        available = filters["available"]
    currency = _context_currency(data) or shop_currency
    return Filters(categories=cats, price_min=pmin, price_max=pmax, currency=currency, available=available)


def parse_search(data: Any, *, shop_currency: str) -> SearchQuery:
    """A ``search_request`` (catalog_search.json) -> :class:`SearchQuery`.

    ``query`` (1-500 characters), ``filters`` (:func:`parse_filters`), ``pagination`` {``cursor``,
    ``limit`` >= 1, clamped to 50}, ``sort`` (a gateway extension: relevance | price_asc |
    price_desc | title | newest). At least one of ``query`` and ``filters`` (UCP search.md: an
    empty request is refused).
    """
    data = _obj(data, "$")
    query = data.get("query")
    if query is not None:
        if not isinstance(query, str):
            raise BadRequest("$.query must be a string")
        if len(query) > QUERY_MAX_LENGTH:
            raise BadRequest(f"$.query is longer than {QUERY_MAX_LENGTH} characters")
        if not query.strip() or not query.isprintable():
            raise BadRequest("$.query must be printable text that is not blank")
        query = query.strip()
    if query is None and data.get("filters") is None:
        raise BadRequest("a search needs a query or filters (UCP catalog search)")
    f = parse_filters(data, shop_currency=shop_currency)
    sort = data.get("sort", "relevance" if query else "title")
    if sort not in SORTS:
        raise BadRequest(f"$.sort must be one of {', '.join(SORTS)}")
    if sort == "relevance" and query is None:
        sort = "title"  # UCP: without a query, no relevance ranking
    limit, after, mode = SEARCH_DEFAULT_LIMIT, None, sort
    if data.get("pagination") is not None:
        pag = _obj(data["pagination"], "$.pagination")
        if pag.get("limit") is not None:
            if type(pag["limit"]) is not int or pag["limit"] < 1:
                raise BadRequest("$.pagination.limit must be an integer >= 1")
            limit = min(pag["limit"], SEARCH_MAX_LIMIT)
        if pag.get("cursor") is not None:
            modes = ("relevance", "fuzzy", "trgm") if sort == "relevance" else (sort,)
            mode, *key = _decode_after(pag["cursor"], modes)
            after = (key[0], key[1])
    return SearchQuery(text=query, categories=f.categories, price_min=f.price_min, price_max=f.price_max,
                       currency=f.currency, available=f.available, sort=sort, limit=limit, after=after,
                       fuzzy=mode == "fuzzy", trgm=mode == "trgm")  # fmt: skip


def _decode_after(cursor: Any, modes: tuple[str, ...]) -> tuple[str, Any, str]:
    """``(mode, sort value, last id)`` from a cursor of :func:`next_cursor`, whose mode must be one
    of ``modes`` (the cursor belongs to a search with this sort)."""
    bad = BadRequest("$.pagination.cursor is not a cursor of this search", code="invalid_cursor")
    try:
        got = json.loads(decode_cursor(cursor, max_length=600))
    except ValueError:
        raise bad from None
    if not (isinstance(got, list) and len(got) == 3 and got[0] in modes and isinstance(got[2], str)):
        raise bad
    mode, value, last_id = got
    ok = {
        "relevance": isinstance(value, float | int) and not isinstance(value, bool),
        "fuzzy": isinstance(value, float | int) and not isinstance(value, bool),
        "trgm": isinstance(value, float | int) and not isinstance(value, bool),
        "price_asc": type(value) is int,
        "price_desc": type(value) is int,
        "title": isinstance(value, str),
        "newest": isinstance(value, str),
    }[mode]
    if not ok:
        raise bad
    if mode == "newest":
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise bad from None
    return mode, value, last_id


def next_cursor(q: SearchQuery, row: Mapping[str, Any]) -> str:
    """The opaque cursor after ``row`` (its sort key and id) for the search ``q``."""
    kind = "trgm" if q.trgm else "fuzzy" if q.fuzzy else q.sort
    value = row["sort_key"]
    if isinstance(value, datetime):
        value = value.isoformat()
    return encode_cursor(json.dumps([kind, value, row["id"]], separators=(",", ":")))


def parse_lookup(data: Any, *, shop_currency: str = "USD") -> tuple[list[str], Filters]:
    """A ``lookup_request``: ``(ids, filters)``. ``ids``: 1..50 strings (product or variant ids,
    SKUs, GTINs, handles), deduplicated in order; more: ``request_too_large`` (UCP lookup.md).
    ``filters``: :func:`parse_filters` (applied after resolution)."""
    data = _obj(data, "$")
    ids = data.get("ids")
    if not isinstance(ids, list) or not ids:
        raise BadRequest("$.ids must be a non-empty array of strings")
    if len(ids) > LOOKUP_MAX_IDS:
        raise RequestTooLarge(f"at most {LOOKUP_MAX_IDS} ids per lookup")
    out = list(dict.fromkeys(_text(x, f"$.ids[{i}]") for i, x in enumerate(ids)))
    return out, parse_filters(data, shop_currency=shop_currency)


def parse_get(
    data: Any, *, shop_currency: str = "USD"
) -> tuple[str, list[tuple[str, str, str | None]], list[str], Filters]:
    """A ``get_product_request``: ``(id, selected [(name, label, id?)], preferences [name],
    filters)`` (:func:`parse_filters`: they narrow the variants)."""
    data = _obj(data, "$")
    pid = _text(data.get("id"), "$.id")
    if not isinstance(data.get("selected") or [], list) or not isinstance(data.get("preferences") or [], list):
        raise BadRequest("$.selected and $.preferences must be arrays")
    selected: list[tuple[str, str, str | None]] = []
    names: set[str] = set()
    for i, s in enumerate(data.get("selected") or []):
        s = _obj(s, f"$.selected[{i}]")
        name, label = _text(s.get("name"), f"$.selected[{i}].name"), _text(s.get("label"), f"$.selected[{i}].label")
        if name in names:
            raise BadRequest(f"$.selected[{i}].name: {name!r} is selected twice")
        names.add(name)
        oid = s.get("id")
        selected.append((name, label, _text(oid, f"$.selected[{i}].id") if oid is not None else None))
    prefs = [_text(p, f"$.preferences[{i}]") for i, p in enumerate(data.get("preferences") or [])]
    return pid, selected, prefs, parse_filters(data, shop_currency=shop_currency)


def _price(amount: int, currency: str) -> dict[str, Any]:
    return {"amount": amount, "currency": currency.strip()}


def _options(variants: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Product options from the variants' option values, in first-seen order."""
    names: dict[str, list[str]] = {}
    for v in variants:
        for o in v["options"]:
            vals = names.setdefault(o["name"], [])
            if o["label"] not in vals:
                vals.append(o["label"])
    return [{"name": n, "values": [{"label": label} for label in vals]} for n, vals in names.items()]


def render_variant(v: Mapping[str, Any], product: Mapping[str, Any], url: str, *, include_stock: bool = False):
    """One variant (types/variant.json): price, availability from stock, options, sku, barcodes."""
    cur = v["currency"].strip()
    out: dict[str, Any] = {
        "id": v["id"],
        "title": v["title"],
        "description": {"plain": product["description"]},
        "price": _price(v["price"], cur),
        "availability": {"available": v["stock"] > 0, "status": "in_stock" if v["stock"] > 0 else "out_of_stock"},
        "options": [{"name": o["name"], "label": o["label"]} for o in v["options"]],
        "url": f"{url}?variant={v['id']}",
    }
    if v.get("sku"):
        out["sku"] = v["sku"]
    if v.get("gtin"):
        out["barcodes"] = [{"type": "GTIN", "value": v["gtin"]}]
    if v.get("list_price") is not None and v["list_price"] > v["price"]:
        out["list_price"] = _price(v["list_price"], cur)
    if v.get("image_url"):
        out["media"] = [{"type": "image", "url": v["image_url"]}]
    if include_stock:
        out["_stock"] = v["stock"]
    return out


def render_product(row: Mapping[str, Any], base_url: str, *, include_stock: bool = False,
                   variants: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """A product (types/product.json) from a catalog_store row; ``variants`` (rows) defaults to all
    of them. ``url`` is the shop's product page (its ``continue_url`` for people)."""
    url = f"{base_url}/products/{row['handle']}"
    vs = list(row["variants"]) if variants is None else list(variants)
    cur = (row["currency"] or "USD").strip()
    out: dict[str, Any] = {
        "id": row["id"],
        "handle": row["handle"],
        "title": row["title"],
        "description": {"plain": row["description"]},
        "url": url,
        "price_range": {"min": _price(row["min_price"] or 0, cur), "max": _price(row["max_price"] or 0, cur)},
        "variants": [render_variant(v, row, url, include_stock=include_stock) for v in vs],
    }
    if row.get("brand"):
        out["brand"] = row["brand"]
    if row["categories"]:
        out["categories"] = [{"value": c} for c in row["categories"]]
    if row["media"]:
        out["media"] = list(row["media"])
    opts = _options(row["variants"])
    if opts:
        out["options"] = opts
    if row["tags"]:
        out["tags"] = list(row["tags"])
    lps = [v["list_price"] for v in row["variants"] if v.get("list_price") is not None and v["list_price"] > v["price"]]
    if lps:
        out["list_price_range"] = {"min": _price(min(lps), cur), "max": _price(max(lps), cur)}
    return out


def _featured(variants: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    return next((v for v in variants if v["stock"] > 0), variants[0])


def lookup_products(
    rows: Sequence[Mapping[str, Any]], base_url: str, filters: Filters = NO_FILTERS
) -> list[dict[str, Any]]:
    """Lookup results: each product once, with only the variants an input resolved to, each
    carrying ``inputs[] {id, match}`` (``exact``: a variant id, SKU or GTIN named it;
    ``featured``: the product was named and this is its featured variant). UCP lookup.md.
    ``filters`` apply after resolution: a named variant they drop is left out, a named product's
    featured variant is chosen among those they keep, and a product left with no variant is
    dropped (UCP lookup: filters narrow the returned products and variants)."""
    out = []
    for row in rows:
        variants = filters.variants(row)
        if not variants:
            continue
        kept = {v["id"] for v in variants}
        inputs: dict[str, list[dict[str, str]]] = {}
        for h in row["hits"]:
            if h["variant_id"] is None:
                vid, match = _featured(variants)["id"], "featured"
            elif h["variant_id"] in kept:
                vid, match = h["variant_id"], "exact"
            else:
                continue
            inputs.setdefault(vid, []).append({"id": h["input"], "match": match})
        if not inputs:
            continue
        chosen = [v for v in variants if v["id"] in inputs]
        prod = render_product(row, base_url, variants=chosen)
        for v in prod["variants"]:
            v["inputs"] = sorted(inputs[v["id"]], key=lambda x: x["id"])
        out.append(prod)
    return out


def _matches(v: Mapping[str, Any], sel: Mapping[str, str]) -> bool:
    opts = {o["name"]: o["label"] for o in v["options"]}
    return all(opts.get(n) == label for n, label in sel.items())


def product_detail(row: Mapping[str, Any], base_url: str, selected: Sequence[tuple[str, str, str | None]],
                   preferences: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """get_product (UCP lookup.md "Get Product"): the effective selection after relaxation, the
    featured variant first (the named variant when ``row['input']`` is a variant id), the variants
    matching the selection, and ``options[].values[]`` with ``available``/``exists`` relative to it.
    ``row["variants"]`` are the variants to choose from (the caller applies the filters first)."""
    variants = list(row["variants"])
    named = next((v for v in variants if v["id"] == row.get("input")), None)
    if named is not None:  # a variant id: its own options are the selection (a conflicting one is ignored)
        sel = {o["name"]: o["label"] for o in named["options"]}
    else:
        sel = {n: label for n, label, _ in selected}
        # relax: drop names not in preferences first, then from the end of the preferences
        order = [n for n in sel if n not in preferences] + [n for n in reversed(preferences) if n in sel]
        while sel and not any(_matches(v, sel) for v in variants):
            sel.pop(order.pop(0))
    matching = [v for v in variants if _matches(v, sel)] or variants
    featured = named or _featured(matching)
    chosen = [featured] + [v for v in matching if v["id"] != featured["id"]]
    prod = render_product(row, base_url, variants=chosen)
    effective = {o["name"]: o["label"] for o in featured["options"]}
    if prod.get("options"):
        prod["selected"] = [{"name": n, "label": label} for n, label in effective.items()]
        for opt in prod["options"]:
            for val in opt["values"]:
                probe = dict(effective, **{opt["name"]: val["label"]})
                hits = [v for v in variants if _matches(v, probe)]
                val["exists"] = bool(hits)
                val["available"] = any(v["stock"] > 0 for v in hits)
    return prod

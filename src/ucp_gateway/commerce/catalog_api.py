"""UCP catalog search and lookup, the pure part of the requests: parsing, filters, cursors (the
answers' wire shapes are :mod:`.catalog_wire`).

Sources: UCP catalog search.md and lookup.md (S:shopping/catalog_search.json, catalog_lookup.json).
Money is integer minor units. Every parse function raises BadRequest (400 ``invalid_request``,
naming the field) for input the schema refuses; over-large lookups are ``request_too_large``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
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
    "next_cursor",
    "parse_filters",
    "parse_get",
    "parse_lookup",
    "parse_search",
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

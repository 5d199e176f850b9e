"""UCP catalog answers, pure: the product and variant wire shapes (types/product.json,
types/variant.json) from catalog_store rows, lookup results with their ``inputs[]``, and the
option selection of get_product (UCP catalog lookup.md). Money is integer minor units. The
requests are parsed by :mod:`.catalog_api`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .catalog_api import NO_FILTERS, Filters

__all__ = ["lookup_products", "product_detail", "render_product", "render_variant"]


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

"""Product feeds in, product feeds out (pure): the gateway's catalogue CSV, the Google Merchant
product feed (TSV or RSS 2.0 XML with the ``g:`` namespace), and the OpenAI product feed (JSON Lines).

One feed line is one *variant* (the sellable unit checkout prices: ``line_items[].item.id``);
lines with the same ``product_id`` (Google: ``item_group_id``) are the variants of one product,
whose product-level fields come from its first line.

The catalogue CSV header (UTF-8, RFC 4180; columns in any order, unknown columns ignored)::

    product_id    required; [A-Za-z0-9][A-Za-z0-9._:-]{0,199}
    handle        URL slug [a-z0-9-]; default: from product_id
    title         required; the product title
    description   plain text
    brand
    categories    "|"-separated category values (Bouquets|Roses)
    tags          "|"-separated
    image_url     https URL of the featured image (more: "|"-separated)
    variant_id    the item id checkout uses; default: the SKU
    sku           required; the import is idempotent by SKU
    gtin          8-14 digits (GTIN-8/12/13/14)
    variant_title the item title at checkout; default: "title (option values)"
    option1_name, option1_value, option2_name, option2_value, option3_name, option3_value
    price         required; integer minor units (3500 = $35.00)
    list_price    integer minor units, the price before a reduction
    currency      ISO 4217; default USD
    stock         integer >= 0; absent = leave the stock as it is (new variant: 0)

Google Merchant attributes read: ``id`` (-> sku and variant id), ``item_group_id`` (-> product_id;
default: id), ``title``, ``description``, ``link``, ``image_link``, ``additional_image_link``,
``availability`` (``in_stock``/``out_of_stock``/``preorder``/``backorder``), ``price`` and
``sale_price`` (``"35.00 USD"``), ``brand``, ``gtin``, ``google_product_category``,
``product_type`` (``" > "`` path: categories), ``color``, ``size``, ``material``, ``pattern``
(options), ``quantity`` (a gateway extension; else in stock = :data:`GOOGLE_IN_STOCK`).
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = [
    "CSV_HEADER",
    "GOOGLE_IN_STOCK",
    "FeedError",
    "FeedItem",
    "minor_units",
    "parse_feed",
    "sniff_format",
    "to_google_tsv",
    "to_openai_jsonl",
]

CSV_HEADER = (
    "product_id,handle,title,description,brand,categories,tags,image_url,variant_id,sku,gtin,variant_title,"
    "option1_name,option1_value,option2_name,option2_value,option3_name,option3_value,price,list_price,currency,stock"
).split(",")
GOOGLE_IN_STOCK = 100  # the stock of a Google item "in_stock" without a quantity
MAX_PRICE = 10**12  # minor units; above it a row is refused (no shop sells a 10-billion-dollar rose)
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
_GTIN = re.compile(r"[0-9]{8,14}")
_CURRENCY = re.compile(r"[A-Z]{3}")
# ISO 4217 exponents other than 2 (the currencies a feed is likely to carry)
_EXPONENT = {c: 0 for c in "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF".split()}
_EXPONENT |= {c: 3 for c in "BHD IQD JOD KWD LYD OMR TND".split()}
_G = "{http://base.google.com/ns/1.0}"


class FeedError(ValueError):
    """One bad feed line: ``line`` (1-based, the header is line 1 in CSV/TSV), ``message``."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line, self.message = line, message


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One variant with its product's fields. Money in minor units; ``stock`` None = keep."""

    line: int
    product_id: str
    handle: str
    title: str
    description: str
    brand: str | None
    categories: tuple[str, ...]
    tags: tuple[str, ...]
    media: tuple[str, ...]
    variant_id: str
    sku: str
    gtin: str | None
    variant_title: str
    options: tuple[tuple[str, str], ...]
    price: int
    list_price: int | None
    currency: str
    stock: int | None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def minor_units(text: str, currency: str) -> int:
    """``"35.00"`` in ``currency`` -> 3500. Raises ValueError for junk or too many decimals."""
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"not a number: {text[:40]!r}") from None
    scaled = d.scaleb(_EXPONENT.get(currency, 2))
    if not d.is_finite() or scaled != scaled.to_integral_value():
        raise ValueError(f"{text[:40]!r} has more decimals than {currency} allows")
    return int(scaled)


def _split(v: str, sep: str = "|") -> tuple[str, ...]:
    return tuple(x.strip() for x in v.split(sep) if x.strip())


def _int(v: str, name: str, *, lo: int = 0, hi: int = MAX_PRICE) -> int:
    v = v.strip()
    if not re.fullmatch(r"-?[0-9]{1,15}", v):
        raise ValueError(f"{name} must be an integer (minor units), got {v[:40]!r}")
    n = int(v)
    if not lo <= n <= hi:
        raise ValueError(f"{name} must be between {lo} and {hi}")
    return n


def _slug(s: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", s.lower())).strip("-")[:200] or "product"


def _item(line: int, r: dict[str, str]) -> FeedItem:
    """A canonical row (the CSV columns) -> FeedItem. Raises ValueError naming the column."""
    g = lambda k: (r.get(k) or "").strip()  # noqa: E731
    pid, sku, title = g("product_id"), g("sku"), g("title")
    if not _ID.fullmatch(pid):
        raise ValueError("product_id is required: letters, digits and ._:- (at most 200)")
    if not sku or len(sku) > 200 or not sku.isprintable():
        raise ValueError("sku is required (at most 200 printable characters)")
    if not title or len(title) > 500:
        raise ValueError("title is required (at most 500 characters)")
    vid = g("variant_id") or sku
    if not _ID.fullmatch(vid):
        raise ValueError("variant_id (default: the sku) must be letters, digits and ._:- (at most 200)")
    handle = g("handle") or _slug(pid)
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,199}", handle):
        raise ValueError("handle must be lower-case letters, digits and -")
    gtin = g("gtin") or None
    if gtin is not None and not _GTIN.fullmatch(gtin):
        raise ValueError("gtin must be 8 to 14 digits")
    currency = (g("currency") or "USD").upper()
    if not _CURRENCY.fullmatch(currency):
        raise ValueError("currency must be an ISO 4217 code")
    price = _int(g("price"), "price")
    list_price = _int(g("list_price"), "list_price") if g("list_price") else None
    stock = _int(g("stock"), "stock", hi=2**31 - 1) if g("stock") else None
    options = []
    for n in (1, 2, 3):
        name, value = g(f"option{n}_name"), g(f"option{n}_value")
        if bool(name) != bool(value):
            raise ValueError(f"option{n}_name and option{n}_value go together")
        if name:
            options.append((name[:100], value[:200]))
    if len({n.lower() for n, _ in options}) != len(options):
        raise ValueError("an option name appears twice")
    media = _split(g("image_url"))
    for url in media:
        if not re.fullmatch(r"https?://[^\s\"<>]{1,2000}", url):
            raise ValueError("image_url must be http(s) URLs separated by |")
    labels = " / ".join(v for _, v in options)
    variant_title = g("variant_title") or (f"{title} ({labels})" if labels else title)
    description = g("description")
    if len(description) > 20000:
        raise ValueError("description is longer than 20,000 characters")
    return FeedItem(
        line=line, product_id=pid, handle=handle, title=title, description=description, brand=g("brand") or None,
        categories=_split(g("categories"))[:20], tags=_split(g("tags"))[:50], media=media[:10], variant_id=vid,
        sku=sku, gtin=gtin, variant_title=variant_title[:500], options=tuple(options), price=price,
        list_price=list_price, currency=currency, stock=stock,
    )  # fmt: skip


def _google_row(r: dict[str, str]) -> dict[str, str]:
    """Google Merchant attributes -> the canonical CSV columns."""
    g = lambda k: (r.get(k) or "").strip()  # noqa: E731
    price_text = g("sale_price") or g("price")
    amount, _, currency = price_text.partition(" ")
    currency = currency.strip().upper() or "USD"
    out = {
        "product_id": g("item_group_id") or g("id"),
        "sku": g("id"),
        "variant_id": g("id"),
        "title": g("title"),
        "description": g("description"),
        "brand": g("brand"),
        "gtin": g("gtin"),
        "currency": currency,
        "categories": "|".join(_split(g("product_type"), ">")) or g("google_product_category"),
        "image_url": "|".join(x for x in [g("image_link"), *_split(g("additional_image_link"), ",")] if x),
    }
    try:
        out["price"] = str(minor_units(amount, currency)) if amount else ""
        if g("sale_price") and g("price"):
            out["list_price"] = str(minor_units(g("price").partition(" ")[0], currency))
    except ValueError as exc:
        raise ValueError(f"price: {exc}") from None
    avail = g("availability").lower().replace(" ", "_")
    if g("quantity"):
        out["stock"] = g("quantity")
    elif avail:
        if avail not in ("in_stock", "out_of_stock", "preorder", "backorder"):
            raise ValueError(f"availability {avail[:40]!r} is not a Google Merchant value")
        out["stock"] = str(GOOGLE_IN_STOCK if avail in ("in_stock", "backorder", "preorder") else 0)
    n = 0
    for attr in ("color", "size", "material", "pattern"):
        if g(attr) and n < 3:
            n += 1
            out[f"option{n}_name"], out[f"option{n}_value"] = attr.capitalize(), g(attr)
    return out


def _rows_delimited(text: str, delimiter: str) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    for row in reader:
        if None in row:  # more fields than the header names
            row = {k: v for k, v in row.items() if k is not None}
            row["\x00extra"] = "1"
        yield reader.line_num, {(k or "").strip().lower(): (v or "") for k, v in row.items()}


def _rows_xml(data: bytes) -> Iterator[tuple[int, dict[str, str]]]:
    # expat (Python >= 3.11 bundles >= 2.4): no external entities or DTD fetches, and entity
    # expansion is bounded (billion laughs refused); the operator's own feed file
    root = ET.fromstring(data)  # noqa: S314
    items = root.iter("item") if root.find(".//item") is not None else root.iter("entry")
    for n, item in enumerate(items, start=1):
        row = {}
        for child in item:
            tag = child.tag.replace(_G, "").split("}")[-1]
            text = (child.text or "").strip()
            if tag == "additional_image_link" and row.get(tag):
                text = row[tag] + "," + text
            row[tag] = text
        yield n, row


def sniff_format(name: str, head: bytes) -> str:
    """``csv`` | ``google-tsv`` | ``google-xml`` from a file name and its first bytes."""
    lower = name.lower()
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if lower.endswith(".xml") or start == b"<":
        return "google-xml"
    if lower.endswith((".tsv", ".txt")) or b"\t" in head.split(b"\n", 1)[0]:
        return "google-tsv"
    return "csv"


def parse_feed(data: bytes, fmt: str) -> tuple[list[FeedItem], list[FeedError]]:
    """Every line of a feed, parsed: ``(good items in feed order, errors by line)``.

    ``fmt``: ``csv`` (the gateway's header above), ``google-tsv``, ``google-xml`` (line = the n-th
    ``<item>``). A feed that cannot be read at all (not UTF-8, no header, broken XML) is one error
    at line 1 and no items. A SKU that appears twice keeps its first line; the later ones are errors.
    """
    items: list[FeedItem] = []
    errors: list[FeedError] = []
    try:
        if fmt == "google-xml":
            rows: Iterable[tuple[int, dict[str, str]]] = list(_rows_xml(data))
        else:
            text = data.decode("utf-8-sig")
            rows = _rows_delimited(text, "\t" if fmt == "google-tsv" else ",")
    except (UnicodeDecodeError, ET.ParseError) as exc:
        return [], [FeedError(1, f"unreadable feed: {exc}")]
    seen: dict[str, int] = {}
    header_checked = False
    try:
        for line, row in rows:
            if not header_checked and fmt == "csv":
                header_checked = True
                missing = [c for c in ("product_id", "title", "sku", "price") if c not in row]
                if missing:
                    return [], [FeedError(1, f"header lacks {', '.join(missing)} (see the documented header)")]
            try:
                if row.pop("\x00extra", None):
                    raise ValueError("more fields than the header has")
                item = _item(line, _google_row(row) if fmt.startswith("google") else row)
            except ValueError as exc:
                errors.append(FeedError(line, str(exc)))
                continue
            if item.sku in seen:
                errors.append(FeedError(line, f"sku {item.sku!r} already on line {seen[item.sku]}"))
                continue
            seen[item.sku] = line
            items.append(item)
    except csv.Error as exc:
        errors.append(FeedError(0, f"unreadable CSV: {exc}"))
    return items, errors


def _money(amount: int, currency: str) -> str:
    exp = _EXPONENT.get(currency, 2)
    return f"{Decimal(amount).scaleb(-exp):.{exp}f} {currency}"


def to_google_tsv(products: Iterable[dict[str, Any]], base_url: str) -> Iterator[str]:
    """Lines of a Google Merchant TSV feed (header first) from rendered UCP products (one line per
    variant, ``item_group_id`` = the product id)."""
    cols = ["id", "item_group_id", "title", "description", "link", "image_link", "availability", "price",
            "sale_price", "brand", "gtin", "product_type", "color", "size"]  # fmt: skip
    yield "\t".join(cols) + "\n"
    clean = lambda s: re.sub(r"[\t\r\n]+", " ", str(s or ""))  # noqa: E731
    for p in products:
        for v in p["variants"]:
            opts = {o["name"].lower(): o["label"] for o in v.get("options", [])}
            lp = v.get("list_price")
            row = {
                "id": v.get("sku") or v["id"], "item_group_id": p["id"], "title": v["title"],
                "description": p["description"].get("plain", ""), "link": p.get("url", f"{base_url}/"),
                "image_link": (p.get("media") or [{}])[0].get("url", ""),
                "availability": "in_stock" if v["availability"]["available"] else "out_of_stock",
                "price": _money(lp["amount"] if lp else v["price"]["amount"], v["price"]["currency"]),
                "sale_price": _money(v["price"]["amount"], v["price"]["currency"]) if lp else "",
                "brand": p.get("brand", ""), "gtin": next((b["value"] for b in v.get("barcodes", [])), ""),
                "product_type": " > ".join(c["value"] for c in p.get("categories", [])),
                "color": opts.get("colour") or opts.get("color", ""), "size": opts.get("size", ""),
            }  # fmt: skip
            yield "\t".join(clean(row[c]) for c in cols) + "\n"


def to_openai_jsonl(products: Iterable[dict[str, Any]], base_url: str) -> Iterator[dict[str, Any]]:
    """Records of the OpenAI product feed (one per variant; ``item_group_id`` the product), for JSON
    Lines: ``enable_search``/``enable_checkout`` true, prices as ``"35.00 USD"``."""
    for p in products:
        for v in p["variants"]:
            rec = {
                "enable_search": True,
                "enable_checkout": True,
                "id": v["id"],
                "item_group_id": p["id"],
                "title": v["title"],
                "description": p["description"].get("plain", ""),
                "link": p.get("url", f"{base_url}/"),
                "price": _money(v["price"]["amount"], v["price"]["currency"]),
                "availability": "in_stock" if v["availability"]["available"] else "out_of_stock",
                "inventory_quantity": v.get("_stock", 0),
            }
            if p.get("media"):
                rec["image_link"] = p["media"][0]["url"]
            if p.get("brand"):
                rec["brand"] = p["brand"]
            if v.get("barcodes"):
                rec["gtin"] = v["barcodes"][0]["value"]
            if v.get("sku"):
                rec["mpn"] = v["sku"]
            if p.get("categories"):
                rec["product_category"] = " > ".join(c["value"] for c in p["categories"])
            yield rec

"""``ucp-gateway catalog import|export``: feeds parsed line by line, imported in batches idempotently
by SKU (bad lines reported, good ones landed), exported as Google Merchant TSV and OpenAI JSONL."""

from __future__ import annotations

import json

import pytest

from tests.test_cli import run
from ucp_gateway.commerce.catalog_cli import import_items
from ucp_gateway.commerce.catalog_feed import CSV_HEADER, minor_units, parse_feed
from ucp_gateway.db import tenant_tx
from ucp_gateway.tenancy import create_company

HEAD = ",".join(CSV_HEADER)


@pytest.fixture
def db_env(db_settings):
    return {"DATABASE_URL": db_settings.database_url}


def line(pid="p1", sku="S1", price="1200", stock="5", title="Blue Iris", **kw) -> str:
    row = dict.fromkeys(CSV_HEADER, "")
    row.update(product_id=pid, title=title, sku=sku, price=price, stock=stock, categories="Irises|Bouquets", **kw)
    return ",".join(row[c] for c in CSV_HEADER)


def feed(*lines: str) -> bytes:
    return ("\n".join([HEAD, *lines]) + "\n").encode()


def test_parse_reports_each_bad_line_and_keeps_the_good_ones():
    data = feed(
        line(),
        line(sku="S2", price="-1"),  # line 3: negative price
        line(sku="S3", price="12.50"),  # line 4: not minor units
        line(pid="", sku="S4"),  # line 5: no product id
        line(sku="S1"),  # line 6: SKU repeated
        line(sku="S5", gtin="12ab"),  # line 7: bad GTIN
        line(pid="p2", sku="S6", option1_name="Colour", option1_value="Blue"),
    )
    items, errors = parse_feed(data, "csv")
    assert [i.sku for i in items] == ["S1", "S6"]
    assert [e.line for e in errors] == [3, 4, 5, 6, 7]
    assert "price" in errors[0].message and "already on line 2" in errors[3].message
    assert items[1].variant_title == "Blue Iris (Blue)" and items[1].variant_id == "S6"
    _, errs = parse_feed(b"title,price\nx,1\n", "csv")
    assert errs[0].line == 1 and "header lacks" in errs[0].message
    assert parse_feed(b"\xff\xfe", "csv")[1][0].message.startswith("unreadable")
    assert (
        minor_units("35.00", "USD") == 3500 and minor_units("500", "JPY") == 500 and minor_units("1.250", "KWD") == 1250
    )


def test_google_merchant_tsv_and_xml_read_as_variants():
    tsv = (
        b"id\titem_group_id\ttitle\tdescription\tprice\tsale_price\tavailability\tgtin\tcolor\tproduct_type\n"
        b"G1\tgrp\tTulips\tNice\t30.00 USD\t25.00 USD\tin_stock\t4006381333931\tRed\tFlowers > Tulips\n"
        b"G2\tgrp\tTulips\tNice\t30.00 USD\t\tout_of_stock\t\tYellow\tFlowers > Tulips\n"
        b"G3\t\tBad\t\tthirty USD\t\tin_stock\t\t\t\n"
    )
    items, errors = parse_feed(tsv, "google-tsv")
    assert [(i.product_id, i.sku, i.price, i.list_price, i.stock) for i in items] == [
        ("grp", "G1", 2500, 3000, 100), ("grp", "G2", 3000, None, 0)
    ]  # fmt: skip
    assert items[0].categories == ("Flowers", "Tulips") and items[0].options == (("Color", "Red"),)
    assert [e.line for e in errors] == [4]
    xml = b"""<?xml version="1.0"?><rss xmlns:g="http://base.google.com/ns/1.0" version="2.0"><channel>
      <item><g:id>X1</g:id><g:title>Lily</g:title><g:price>12.00 EUR</g:price>
        <g:availability>in stock</g:availability></item>
      <item><g:id>X2</g:id><g:price>12.00 EUR</g:price></item></channel></rss>"""
    items, errors = parse_feed(xml, "google-xml")
    assert [(i.sku, i.currency, i.price) for i in items] == [("X1", "EUR", 1200)]
    assert errors[0].line == 2 and "title" in errors[0].message


async def test_import_is_idempotent_by_sku_and_lands_good_lines(database):
    c = await create_company(database.pool, slug="iris", display_name="Iris", hostnames=("iris.example",))
    items, _ = parse_feed(feed(line(), line(sku="S2", stock="0"), line(pid="p2", sku="S3", title="Red Iris")), "csv")
    counts, errors = await import_items(database, c.id, items, batch=2)
    assert errors == [] and counts["variants_inserted"] == 3 and counts["products_inserted"] == 2
    again, errors = await import_items(database, c.id, items, batch=2)
    assert errors == [] and all(v == 0 for v in again.values()), again  # nothing changed
    # a price change updates one variant; a SKU moved to another variant id is refused by line
    items, _ = parse_feed(feed(line(price="1300"), line(sku="S3", variant_id="other", pid="p2")), "csv")
    counts, errors = await import_items(database, c.id, items)
    assert counts["variants_updated"] == 1 and [e.line for e in errors] == [3]
    async with tenant_tx(database.pool, c.id) as conn:
        assert await conn.fetchval("SELECT max_price FROM catalog_products WHERE id = 'p1'") == 1300
        assert await conn.fetchval("SELECT count(*) FROM products") == 3


def test_cli_import_reports_lines_and_export_writes_feeds(db_env, tmp_path):
    assert run(["companies", "create", "lily", "--host", "lily.example"], db_env).returncode == 0
    f = tmp_path / "feed.csv"
    f.write_bytes(feed(line(), line(sku="S2", price="x"), line(pid="p2", sku="S3", gtin="4006381333931")))
    p = run(["catalog", "import", "--company", "lily", str(f), "--json"], db_env)
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert out["lines_ok"] == 2 and out["errors"][0]["line"] == 3 and out["variants_inserted"] == 2
    p = run(["catalog", "import", "--company", "lily", str(f)], db_env)
    assert "variants 0 new, 0 changed" in p.stdout and "3: " in p.stdout
    p = run(["catalog", "export", "--company", "lily", "--format", "google-merchant"], db_env)
    rows = [r.split("\t") for r in p.stdout.splitlines()]
    assert rows[0][:3] == ["id", "item_group_id", "title"] and {r[0] for r in rows[1:]} == {"S1", "S3"}
    assert "12.00 USD" in p.stdout and "4006381333931" in p.stdout
    p = run(["catalog", "export", "--company", "lily", "--format", "openai-jsonl"], db_env)
    recs = [json.loads(x) for x in p.stdout.splitlines()]
    assert {r["id"] for r in recs} == {"S1", "S3"} and recs[0]["enable_checkout"] is True
    assert {r["inventory_quantity"] for r in recs} == {5}


def test_progress_bar_counts_to_the_total():
    import io

    from ucp_gateway.commerce.catalog_cli import _bar

    out = io.StringIO()
    show = _bar(out)
    show(1000, 2500)
    show(2500, 2500)
    text = out.getvalue()
    assert "1000/2500 variants" in text and text.endswith("2500/2500 variants, " + text.rsplit(", ", 1)[1])
    assert text.count("\r") == 2 and text.endswith("/s\n") and "[" + "#" * 30 + "]" in text


async def test_a_new_product_is_written_once_with_its_variant_figures(database):
    """A new product row carries its variants' price range, currency, stock and option labels from
    its insert: the batch's refresh rewrites none (a second write per row left half of an imported
    table dead space and indexed each search document twice)."""
    from ucp_gateway.commerce import catalog_store

    company = await create_company(database.pool, slug="once-shop", display_name="Once", hostnames=["once.example"])
    items, errors = parse_feed(feed(line(option1_name="Size", option1_value="Small", stock="0"),
                                    line(sku="S2", price="1800", option1_name="Size", option1_value="Large"),
                                    line(pid="p2", sku="S3", price="900", stock="")), "csv")  # fmt: skip
    assert not errors
    async with tenant_tx(database.pool, company.id) as conn:
        counts, errs = await catalog_store.upsert_items(conn, company.id, items)
        written = await conn.fetchrow(
            "SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'catalog_products'"
        )
        rows = {r["id"]: dict(r) for r in await conn.fetch(
            "SELECT id, min_price, max_price, currency, available, variant_text FROM catalog_products")}  # fmt: skip
    assert not errs and counts["products_inserted"] == 2
    assert (written["n_tup_ins"], written["n_tup_upd"]) == (2, 0)
    assert rows["p1"] == {"id": "p1", "min_price": 1200, "max_price": 1800, "currency": "USD", "available": True,
                          "variant_text": "Large Small"}  # fmt: skip
    assert rows["p2"]["available"] is False and rows["p2"]["variant_text"] == ""

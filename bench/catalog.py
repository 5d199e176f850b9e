"""Catalog search benchmark: search_catalog p50/p99 at 32 concurrent agents over a catalogue of
1,000 and one of 100,000 generated products (about two variants each), on the embedded PostgreSQL.

It generates each catalogue as a feed in the documented CSV format and imports it with the
``catalog import`` code (so the import time of 100,000 products is measured too), then runs the
searches an agent sends: two-word queries (``red roses``), one-word ones, queries with a price or
availability filter, category browsing sorted by price, and second pages through the cursor.

``--mode op`` (default) measures the catalog operation itself, as a buyer verb's handler runs it:
one tenant transaction, the search statement, the rendering of the page. ``--mode http`` sends the
same searches to ``POST /ucp/v1/catalog/search`` of the real gateway app over loopback
(unsigned, signature policy off: the figure then also holds aiohttp, negotiation, the verb
dispatcher and its audit row, on the same two cores as the load generator).

Targets (issue): p99 <= 20 ms at 100,000 products on 2 cores; p50 at 100,000 <= 2 x p50 at 1,000.

``--think-ms`` gives each agent a pause between its searches (an agent reads an answer before its
next call); 0, the default, sends them back to back (saturation: latency is then the queue).

Usage: python bench/catalog.py [--sizes 1000,100000] [--n 4000] [--concurrency 32] [--mode op|http]
       [--think-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from ucp_gateway.commerce import catalog_service
from ucp_gateway.commerce.catalog_cli import import_items
from ucp_gateway.commerce.catalog_feed import CSV_HEADER, parse_feed
from ucp_gateway.commerce.checkout import ShopInfo
from ucp_gateway.commerce.service import CommerceContext
from ucp_gateway.config import Settings
from ucp_gateway.db import open_database, tenant_tx
from ucp_gateway.db.database import owner_connect
from ucp_gateway.tenancy import create_company

FLOWERS = ("roses lilies tulips orchids peonies sunflowers daisies carnations hydrangeas ranunculus "
           "anemones dahlias freesias gerberas irises lavender magnolias marigolds poppies snapdragons "
           "camellias gardenias jasmine lilacs lupins narcissus pansies primroses zinnias asters "
           "begonias bluebells chrysanthemums cornflowers cosmos delphiniums foxgloves geraniums "
           "gladioli heather hollyhocks hyacinths alliums amaryllis azaleas calla clematis crocuses "
           "edelweiss fuchsias hellebores honeysuckle larkspur lotus mimosa nasturtiums proteas stocks"
           ).split()  # fmt: skip
COLOURS = "red white pink yellow orange purple blue cream peach coral lilac burgundy green ivory mixed".split()
KINDS = "bouquet bunch plant arrangement basket box wreath stems posy centrepiece garland bundle".split()
ADJECTIVES = ("classic luxury petite grand seasonal fresh scented elegant rustic wild garden deluxe "
              "premium simple bright soft vintage modern sweet royal").split()  # fmt: skip
OCCASIONS = ("birthday anniversary wedding sympathy romance thanks congratulations baby get-well "
             "mothers-day valentine graduation retirement housewarming apology").split()  # fmt: skip
CATEGORIES = ("Bouquets Plants Wedding Sympathy Gifts Dried Garden Seasonal Luxury Office Roses Lilies "
              "Tulips Orchids Succulents").split()  # fmt: skip
SIZES = ("Small", "Medium", "Large")


def feed(n: int, seed: int = 7) -> bytes:
    """A catalogue CSV of ``n`` products with 1-3 variants each (the import format)."""
    rnd = random.Random(seed)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_HEADER)
    for i in range(n):
        flower, colour, kind = rnd.choice(FLOWERS), rnd.choice(COLOURS), rnd.choice(KINDS)
        title = f"{rnd.choice(ADJECTIVES).capitalize()} {colour} {flower} {kind}"
        words = rnd.sample(FLOWERS, 3) + rnd.sample(OCCASIONS, 2) + [colour, kind]
        desc = f"A {kind} of {colour} {flower} for {rnd.choice(OCCASIONS)}; with {', '.join(words[:3])}."
        cats = "|".join(rnd.sample(CATEGORIES, 2))
        base = rnd.randrange(500, 20000, 50)
        for j, size in enumerate(SIZES[: rnd.randint(1, 3)]):
            row = dict.fromkeys(CSV_HEADER, "")
            row.update(product_id=f"p{i}", title=title, description=desc, categories=cats,
                       tags="|".join(rnd.sample(OCCASIONS, 2)), sku=f"SKU-{i}-{j}", price=str(base + 1500 * j),
                       option1_name="Size", option1_value=size, stock=str(rnd.choice((0, 5, 20, 100))),
                       image_url=f"https://img.example/{i}.jpg")  # fmt: skip
            w.writerow([row[c] for c in CSV_HEADER])
    return out.getvalue().encode()


def requests(n: int, seed: int = 11) -> list[dict]:
    """The mix of searches: 50 % two words, 15 % one word, 15 % a query with a filter, 10 %
    category browse by price, 10 % a second page (filled in by the runner)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        r = rnd.random()
        if r < 0.5:
            out.append({"query": f"{rnd.choice(COLOURS)} {rnd.choice(FLOWERS)}"})
        elif r < 0.65:
            out.append({"query": rnd.choice(FLOWERS + OCCASIONS)})
        elif r < 0.8:
            out.append({"query": f"{rnd.choice(FLOWERS)} {rnd.choice(KINDS)}",
                        "filters": {"price": {"max": rnd.randrange(2000, 20000, 500)}, "available": True}})  # fmt: skip
        elif r < 0.9:
            out.append({"filters": {"categories": [rnd.choice(CATEGORIES)]}, "sort": "price_asc"})
        else:
            out.append({"page2": f"{rnd.choice(COLOURS)} {rnd.choice(FLOWERS)}"})
    return out


def _ctx(company) -> CommerceContext:
    shop = ShopInfo(base_url="https://shop.example", ucp={"version": "2026-04-08", "capabilities": {}})
    return CommerceContext(company_id=company.id, caller="bench", now=datetime.now(UTC), shop=shop, order_ucp={},
                           handler_ids=frozenset())  # fmt: skip


async def _measure(db, company, reqs: list[dict], concurrency: int, think: float) -> tuple[list[float], float]:
    ctx = _ctx(company)
    rnd = random.Random(3)

    async def search(body: dict) -> dict:
        async with tenant_tx(db.pool, company.id) as conn:
            return (await catalog_service.search(conn, ctx, body)).body

    lat: list[float] = []
    todo = iter(reqs)

    async def agent() -> None:
        for body in todo:
            if "page2" in body:  # the first page is the agent's previous call; time the second
                first = await search({"query": body["page2"]})
                cur = first.get("pagination", {}).get("cursor")
                body = {"query": body["page2"], "pagination": {"cursor": cur}} if cur else {"query": body["page2"]}
            t = time.perf_counter()
            await search(body)
            lat.append(time.perf_counter() - t)
            if think:  # the agent reads the answer before its next call (exponential, mean ``think``)
                await asyncio.sleep(rnd.expovariate(1 / think))

    for body in reqs[:200]:  # warm-up: plans, caches
        if "page2" not in body:
            await search(body)
    t0 = time.perf_counter()
    await asyncio.gather(*[agent() for _ in range(concurrency)])
    return lat, time.perf_counter() - t0


async def _measure_http(db, settings, company, reqs: list[dict], concurrency: int) -> tuple[list[float], float]:
    import aiohttp
    from aiohttp import web

    from ucp_gateway.app import create_app

    app = create_app(settings.model_copy(update={"webhook_worker": False}), database=db)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/ucp/v1/catalog/search"
    hdrs = {"UCP-Agent": 'profile="https://agent.example/profile.json"', "Host": f"{company.slug}.example"}
    lat: list[float] = []
    todo = iter(reqs)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:

        async def search(body: dict) -> dict:
            async with http.post(url, json=body, headers=hdrs) as r:
                out = await r.json()
                assert r.status == 200, out
                return out

        async def agent() -> None:
            for body in todo:
                if "page2" in body:
                    first = await search({"query": body["page2"]})
                    cur = first.get("pagination", {}).get("cursor")
                    body = {"query": body["page2"], "pagination": {"cursor": cur}} if cur else {"query": body["page2"]}
                t = time.perf_counter()
                await search(body)
                lat.append(time.perf_counter() - t)

        for body in reqs[:100]:
            if "page2" not in body:
                await search(body)
        t0 = time.perf_counter()
        await asyncio.gather(*[agent() for _ in range(concurrency)])
        wall = time.perf_counter() - t0
    await runner.cleanup()
    return lat, wall


def _pct(lat: list[float], p: float) -> float:
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(len(lat) * p))] * 1000


async def run(sizes: list[int], n: int, concurrency: int, pool: int, mode: str, thinks: list[float]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), environment="development", log_level="warning",
                            db_pool_min=pool, db_pool_max=pool, conformance_mode=False)  # fmt: skip
        async with open_database(settings) as db:
            p50s = {}
            for size in sizes:
                company = await create_company(db.pool, slug=f"cat{size}", display_name=f"Catalog {size}",
                                               hostnames=(f"cat{size}.example",))  # fmt: skip
                if mode == "http":
                    async with tenant_tx(db.pool, company.id) as conn:
                        await conn.execute("UPDATE companies SET signature_policy = 'off' WHERE id = $1", company.id)
                t = time.perf_counter()
                data = feed(size)
                items, errors = parse_feed(data, "csv")
                assert not errors, errors[:3]
                t_parse = time.perf_counter() - t
                _, errors = await import_items(db, company.id, items, batch=2000)
                t_import = time.perf_counter() - t
                assert not errors, errors[:3]
                owner = await owner_connect(db.owner_dsn)  # what autovacuum does after a large import
                try:
                    await owner.execute("VACUUM ANALYZE catalog_products, products, inventory")
                finally:
                    await owner.close()
                print(f"catalog {size:,} products, {len(items):,} variants: feed parsed in {t_parse:.1f} s, "
                      f"imported in {t_import:.1f} s ({len(items) / t_import:,.0f} variants/s)")  # fmt: skip
                reqs = requests(n)
                for think in thinks:
                    if mode == "http":
                        lat, wall = await _measure_http(db, settings, company, reqs, concurrency)
                    else:
                        lat, wall = await _measure(db, company, reqs, concurrency, think)
                    p50s[size, think] = statistics.median(lat) * 1000
                    print(f"  search ({mode}) x{len(lat):,} at {concurrency} agents (think {think * 1000:.0f} ms),"
                          f" pool {pool}: p50 {p50s[size, think]:.2f} ms, p99 {_pct(lat, 0.99):.2f} ms,"
                          f" max {_pct(lat, 1.0):.2f} ms, {len(lat) / wall:,.0f} searches/s")  # fmt: skip
            if len(sizes) >= 2:
                lo, hi = min(sizes), max(sizes)
                for think in thinks:
                    ratio = p50s[hi, think] / p50s[lo, think]
                    print(f"think {think * 1000:.0f} ms: p50 at {hi:,} / p50 at {lo:,} = {ratio:.2f} (target <= 2)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000", help="catalogue sizes (products), comma-separated")
    ap.add_argument("--n", type=int, default=4000, help="searches per catalogue")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--pool", type=int, default=4, help="database connections (two per core)")
    ap.add_argument("--mode", choices=("op", "http"), default="op")
    ap.add_argument("--think-ms", default="0",
                    help="mean pause of each agent between its searches, ms (0: back to back, saturation);"
                    " comma-separated: one run each")  # fmt: skip
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    thinks = [float(t) / 1000 for t in args.think_ms.split(",")]
    asyncio.run(run(sizes, args.n, args.concurrency, args.pool, args.mode, thinks))


if __name__ == "__main__":
    main()

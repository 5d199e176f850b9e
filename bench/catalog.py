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

Every catalogue is imported first, into one database (as a platform's companies share it), and the
sizes are then measured in alternating rounds (``--rounds``), so the load of a busy machine moves
their figures alike and the ratio compares like with like. Last, the shared buffers each kind of
search touches (EXPLAIN ANALYZE BUFFERS of its statements) are printed: the database work per
search, which the machine's load does not move.

``--think-ms`` gives each agent a pause between its searches (an agent reads an answer before its
next call), exponential with that mean, and a first pause drawn the same way, so the agents are
in steady state from the start rather than arriving together (a synchronised start of all agents
is measured apart: a burst of ``--concurrency`` searches at once). 0, the default, sends them back
to back (saturation: latency is then the queue, and p99 <= 20 ms would need 32 / 0.02 = 1,600
searches/s by Little's law).

Usage: python bench/catalog.py [--sizes 1000,100000] [--n 4000] [--concurrency 32] [--mode op|http]
       [--think-ms 0] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
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


def kind_of(body: dict) -> str:
    """The mix's name of a request: two-word, one-word, filtered, browse, page2."""
    if "page2" in body:
        return "page2"
    if "query" not in body:
        return "browse"
    if "filters" in body:
        return "filtered"
    return "two-word" if " " in body["query"] else "one-word"


def _ctx(company) -> CommerceContext:
    shop = ShopInfo(base_url="https://shop.example", ucp={"version": "2026-04-08", "capabilities": {}})
    return CommerceContext(company_id=company.id, caller="bench", now=datetime.now(UTC), shop=shop, order_ucp={},
                           handler_ids=frozenset())  # fmt: skip


async def _second_page(search, body: dict) -> dict:
    """A page-2 request: the first page is the agent's previous call (not timed)."""
    first = await search({"query": body["page2"]})
    cur = first.get("pagination", {}).get("cursor")
    return {"query": body["page2"], "pagination": {"cursor": cur}} if cur else {"query": body["page2"]}


async def _measure(
    db, company, reqs: list[dict], concurrency: int, think: float
) -> tuple[list[tuple[str, float]], float]:
    """``([(kind, seconds)], wall seconds)`` of ``reqs`` sent by ``concurrency`` agents."""
    ctx = _ctx(company)
    rnd = random.Random(3)

    async def search(body: dict) -> dict:
        async with tenant_tx(db.pool, company.id) as conn:
            return (await catalog_service.search(conn, ctx, body)).body

    lat: list[tuple[str, float]] = []
    todo = iter(reqs)

    async def agent() -> None:
        if think:  # in steady state from the start: the residual of an exponential pause is one
            await asyncio.sleep(rnd.expovariate(1 / think))
        for body in todo:
            kind = kind_of(body)
            if kind == "page2":
                body = await _second_page(search, body)
            t = time.perf_counter()
            await search(body)
            lat.append((kind, time.perf_counter() - t))
            if think:  # the agent reads the answer before its next call (exponential, mean ``think``)
                await asyncio.sleep(rnd.expovariate(1 / think))

    t0 = time.perf_counter()
    await asyncio.gather(*[agent() for _ in range(concurrency)])
    return lat, time.perf_counter() - t0


async def _burst(db, company, reqs: list[dict]) -> list[float]:
    """Seconds of each of ``reqs`` sent all at once (every agent arriving in the same instant):
    the queue a synchronised start makes, measured apart from the steady state."""
    ctx = _ctx(company)

    async def one(body: dict) -> float:
        t = time.perf_counter()
        async with tenant_tx(db.pool, company.id) as conn:
            await catalog_service.search(conn, ctx, body)
        return time.perf_counter() - t

    return list(await asyncio.gather(*[one(b) for b in reqs if "page2" not in b]))


class _Explained:
    """A connection stand-in for catalog_search: every statement runs under EXPLAIN (ANALYZE,
    BUFFERS) and its shared buffers (hit + read, planning included) are added up: a figure of the
    database work a search does that the machine's load does not move."""

    def __init__(self, conn):
        self.conn, self.buffers = conn, 0

    async def fetch(self, sql: str, *args):
        got = await self.conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
        (plan,) = json.loads(got) if isinstance(got, str) else got  # the pool decodes json already
        top, planning = plan["Plan"], plan.get("Planning", {})
        self.buffers += sum(
            int(x.get(k, 0)) for x in (top, planning) for k in ("Shared Hit Blocks", "Shared Read Blocks")
        )
        return await self.conn.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args):
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    def __getattr__(self, name):
        return getattr(self.conn, name)


async def buffers_per_kind(db, company, reqs: list[dict], per_kind: int = 20) -> dict[str, float]:
    """Mean shared buffers the search statements of one request touch, per kind (first
    ``per_kind`` requests of each kind; a page-2 request counts its second page only)."""
    ctx = _ctx(company)
    seen: dict[str, list[int]] = {}
    for body in reqs:
        kind = kind_of(body)
        if len(seen.setdefault(kind, [])) >= per_kind:
            continue
        async with tenant_tx(db.pool, company.id) as conn:
            if kind == "page2":
                body = await _second_page(lambda b: _body(catalog_service.search(conn, ctx, b)), body)
            probe = _Explained(conn)
            await catalog_service.search(probe, ctx, body)
        seen[kind].append(probe.buffers)
    return {k: statistics.mean(v) for k, v in seen.items() if v}


async def _body(out):
    return (await out).body


async def _measure_http(
    db, settings, company, reqs: list[dict], concurrency: int
) -> tuple[list[tuple[str, float]], float]:
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
    lat: list[tuple[str, float]] = []
    todo = iter(reqs)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:

        async def search(body: dict) -> dict:
            async with http.post(url, json=body, headers=hdrs) as r:
                out = await r.json()
                assert r.status == 200, out
                return out

        async def agent() -> None:
            for body in todo:
                kind = kind_of(body)
                if kind == "page2":
                    body = await _second_page(search, body)
                t = time.perf_counter()
                await search(body)
                lat.append((kind, time.perf_counter() - t))

        t0 = time.perf_counter()
        await asyncio.gather(*[agent() for _ in range(concurrency)])
        wall = time.perf_counter() - t0
    await runner.cleanup()
    return lat, wall


def _pct(lat: list[float], p: float) -> float:
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(len(lat) * p))] * 1000


async def _load(db, size: int, mode: str):
    company = await create_company(db.pool, slug=f"cat{size}", display_name=f"Catalog {size}",
                                   hostnames=(f"cat{size}.example",))  # fmt: skip
    if mode == "http":
        async with tenant_tx(db.pool, company.id) as conn:
            await conn.execute("UPDATE companies SET signature_policy = 'off' WHERE id = $1", company.id)
    t = time.perf_counter()
    items, errors = parse_feed(feed(size), "csv")
    assert not errors, errors[:3]
    t_parse = time.perf_counter() - t
    _, errors = await import_items(db, company.id, items, batch=2000)
    t_import = time.perf_counter() - t
    assert not errors, errors[:3]
    print(f"catalog {size:,} products, {len(items):,} variants: feed parsed in {t_parse:.1f} s, "
          f"imported in {t_import:.1f} s ({len(items) / t_import:,.0f} variants/s)", flush=True)  # fmt: skip
    return company


async def run(sizes: list[int], n: int, concurrency: int, pool: int, mode: str, thinks: list[float],
              rounds: int = 4, data_dir: Path | None = None) -> dict:  # fmt: skip
    """Import every catalogue first (they share the database, as a platform's companies do), then
    send each one ``n`` searches in ``rounds`` alternating rounds, so that the load of the machine
    moves the sizes' figures alike. Returns ``{(size, think): {"p50", "p99", "max", "rate",
    kind: p50}}`` (ms, searches/s) and prints them, the p50 ratio and the buffers per kind."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=data_dir or Path(tmp), environment="development", log_level="warning",
                            db_pool_min=pool, db_pool_max=pool, conformance_mode=False)  # fmt: skip
        async with open_database(settings) as db:
            companies = {size: await _load(db, size, mode) for size in sizes}
            owner = await owner_connect(db.owner_dsn)  # what autovacuum does after a large import
            try:
                await owner.execute("VACUUM ANALYZE catalog_products, catalog_terms, products, inventory")
            finally:
                await owner.close()
            reqs = requests(n)
            for company in companies.values():  # warm-up: plans, caches
                for body in reqs[:200]:
                    if "page2" not in body:
                        async with tenant_tx(db.pool, company.id) as conn:
                            await catalog_service.search(conn, _ctx(company), body)
            out: dict = {}
            chunk = -(-len(reqs) // rounds)
            for think in thinks:
                lat: dict[int, list[tuple[str, float]]] = {size: [] for size in sizes}
                wall = dict.fromkeys(sizes, 0.0)
                for r in range(rounds):
                    part = reqs[r * chunk : (r + 1) * chunk]
                    for size in sizes if r % 2 == 0 else sizes[::-1]:
                        if mode == "http":
                            got, w = await _measure_http(db, settings, companies[size], part, concurrency)
                        else:
                            got, w = await _measure(db, companies[size], part, concurrency, think)
                        lat[size] += got
                        wall[size] += w
                for size in sizes:
                    secs = [t for _, t in lat[size]]
                    fig = {"p50": statistics.median(secs) * 1000, "p99": _pct(secs, 0.99), "max": _pct(secs, 1.0),
                           "rate": len(secs) / wall[size]}  # fmt: skip
                    for kind in sorted({k for k, _ in lat[size]}):
                        fig[kind] = statistics.median([t for k, t in lat[size] if k == kind]) * 1000
                    out[size, think] = fig
                    kinds = ", ".join(
                        f"{k} {fig[k]:.1f}" for k in sorted(fig) if k not in ("p50", "p99", "max", "rate")
                    )
                    print(f"  {size:,} products, search ({mode}) x{len(secs):,} at {concurrency} agents"
                          f" (think {think * 1000:.0f} ms), pool {pool}: p50 {fig['p50']:.2f} ms,"
                          f" p99 {fig['p99']:.2f} ms, max {fig['max']:.2f} ms, {fig['rate']:,.0f} searches/s;"
                          f" p50 by kind: {kinds}")  # fmt: skip
                if len(sizes) >= 2:
                    lo, hi = min(sizes), max(sizes)
                    ratio = out[hi, think]["p50"] / out[lo, think]["p50"]
                    print(f"think {think * 1000:.0f} ms: p50 at {hi:,} / p50 at {lo:,} = {ratio:.2f} (target <= 2);"
                          f" p99 at {hi:,} {out[hi, think]['p99']:.1f} ms (target <= 20)")  # fmt: skip
            if mode == "op":
                for size, company in companies.items():
                    secs = await _burst(db, company, reqs[:concurrency])
                    out[size, "burst"] = {"p50": statistics.median(secs) * 1000, "max": max(secs) * 1000}
                    print(f"  {size:,} products: {len(secs)} searches at once (a synchronised start): p50"
                          f" {out[size, 'burst']['p50']:.1f} ms, max {out[size, 'burst']['max']:.1f} ms")  # fmt: skip
            for size, company in companies.items():
                per = await buffers_per_kind(db, company, reqs)
                out[size, "buffers"] = per
                print(
                    f"  {size:,} products: shared buffers per search (load-independent): "
                    + ", ".join(f"{k} {v:.0f}" for k, v in sorted(per.items()))
                )
            return out


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
    ap.add_argument("--rounds", type=int, default=4, help="alternating measurement rounds per size")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    thinks = [float(t) / 1000 for t in args.think_ms.split(",")]
    asyncio.run(run(sizes, args.n, args.concurrency, args.pool, args.mode, thinks, rounds=args.rounds))


if __name__ == "__main__":
    main()

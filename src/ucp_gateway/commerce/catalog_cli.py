"""``ucp-gateway catalog import|export``: product feeds in and out of a company's catalogue.

``catalog import --company SLUG FILE [--format csv|google-tsv|google-xml] [--batch N]``: every line
is parsed first (pure, :mod:`.catalog_feed`); the good lines are written in batches of ``--batch``
variants, one transaction each; a batch the database refuses is retried line by line (each in its
own savepoint) so the bad line is named and the rest land. Idempotent by SKU: importing the same
feed twice changes nothing (the summary says 0 inserted, 0 updated). A progress bar goes to stderr
when it is a terminal. Exit code 0 when every line landed, 1 when some were refused (the report
lists each by line), 2 for usage errors.

``catalog export --company SLUG --format google-merchant|openai-jsonl [--output FILE]``: the
Google Merchant TSV feed or the OpenAI product feed (JSON Lines), to stdout by default.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import asyncpg

from ..clibase import common_parser, emit
from ..config import Settings
from ..db import Database, open_database, tenant_tx
from ..errors import BadRequest
from ..tenancy import get_company
from . import catalog_store
from .catalog_feed import FeedError, FeedItem, parse_feed, sniff_format, to_google_tsv, to_openai_jsonl
from .catalog_wire import render_product

__all__ = ["import_items", "register"]

Progress = Callable[[int, int], None]
ANALYZE_EVERY = 10_000  # variants; then whenever the number written has doubled


async def import_items(
    db: Database, company_id: Any, items: Sequence[FeedItem], *, batch: int = 1000, keep: bool = False,
    progress: Progress | None = None,
) -> tuple[dict[str, int], list[FeedError]]:  # fmt: skip
    """Write ``items`` in batches (one tenant transaction each). Returns summed counts and the
    lines the database refused. ``progress(done, total)`` after each batch. The planner statistics
    of the catalogue tables are refreshed whenever the variants written have doubled, and at the
    end when any were inserted (PostgreSQL: run ANALYZE after a bulk load; autovacuum may take a
    minute to)."""
    totals: dict[str, int] = {}
    errors: list[FeedError] = []
    analyzed = 0  # variants written when the planner statistics were last refreshed
    for start in range(0, len(items), batch):
        written = totals.get("variants_inserted", 0)
        if written >= max(ANALYZE_EVERY, 2 * analyzed):  # the tables doubled: refresh the statistics
            await _analyze(db)  # (a plan made for empty tables scans them: each batch got slower)
            analyzed = written
        chunk = items[start : start + batch]
        try:
            async with tenant_tx(db.pool, company_id) as conn:
                counts, errs = await catalog_store.upsert_items(conn, company_id, chunk, keep=keep)
        except (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError):
            counts, errs = await _one_by_one(db, company_id, chunk, keep)
        errors.extend(errs)
        for k, v in counts.items():
            totals[k] = totals.get(k, 0) + v
        if progress is not None:
            progress(min(start + batch, len(items)), len(items))
    if totals.get("variants_inserted", 0) > analyzed:  # the search plans need the new terms' statistics
        await _analyze(db)  # (planned as if empty, a two-word search read the whole term list: 100x)
    return totals, errors


async def _one_by_one(db: Database, company_id: Any, chunk: Sequence[FeedItem], keep: bool):
    totals: dict[str, int] = {}
    errors: list[FeedError] = []
    async with tenant_tx(db.pool, company_id) as conn:
        for it in chunk:
            try:
                async with conn.transaction():  # savepoint: this line or nothing of it
                    counts, errs = await catalog_store.upsert_items(conn, company_id, [it], keep=keep)
            except (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError) as exc:
                errors.append(FeedError(it.line, f"refused by the database: {str(exc).splitlines()[0][:200]}"))
                continue
            errors.extend(errs)
            for k, v in counts.items():
                totals[k] = totals.get(k, 0) + v
    return totals, errors


def _bar(stream: TextIO) -> Progress:
    started = time.monotonic()

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        rate = done / max(time.monotonic() - started, 1e-6)
        stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} variants, {rate:,.0f}/s")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


async def _analyze(db: Database) -> None:
    """ANALYZE the catalogue tables as the owner (the app role may not; autovacuum does it later)."""
    from ..db.database import owner_connect

    conn = await owner_connect(db.owner_dsn)
    try:
        await conn.execute("ANALYZE catalog_products, catalog_terms, products, inventory")
    finally:
        await conn.close()


async def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    path = Path(args.file)
    try:
        data = await asyncio.to_thread(path.read_bytes)
    except OSError as exc:
        raise BadRequest(f"cannot read {path}: {exc.strerror}") from None
    fmt = args.format or sniff_format(path.name, data[:4096])
    items, errors = parse_feed(data, fmt)
    progress = _bar(sys.stderr) if sys.stderr.isatty() and not args.json else None
    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        counts, db_errors = await import_items(db, company.id, items, batch=args.batch, progress=progress)
        if counts.get("variants_inserted", 0) >= ANALYZE_EVERY:
            await _analyze(db)  # fresh planner statistics after a large import (autovacuum comes later)
    errors = sorted(errors + db_errors, key=lambda e: e.line)
    landed = len(items) - len(db_errors)
    summary = {"company": company.slug, "format": fmt, "lines_ok": landed, "lines_refused": len(errors), **counts,
               "errors": [{"line": e.line, "message": e.message} for e in errors]}  # fmt: skip
    text = [f"{e.line}: {e.message}" for e in errors[:1000]]
    text.append(
        f"{landed} lines imported into {company.slug} ({fmt}): products {counts.get('products_inserted', 0)} new,"
        f" {counts.get('products_updated', 0)} changed; variants {counts.get('variants_inserted', 0)} new,"
        f" {counts.get('variants_updated', 0)} changed; stock set {counts.get('stock_set', 0)};"
        f" {len(errors)} lines refused"
    )
    emit(args, summary, "\n".join(text))
    return 1 if errors else 0


async def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    out: TextIO = await asyncio.to_thread(open, args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        async with open_database(settings) as db:
            company = await get_company(db.pool, args.company)
            host = company.hostnames[0] if company.hostnames else "localhost"
            base = f"{settings.public_scheme}://{host}"
            after, first = "", True
            while True:
                async with tenant_tx(db.pool, company.id) as conn:
                    rows = await catalog_store.export_rows(conn, after=after)
                if not rows:
                    break
                after = rows[-1]["id"]
                products = [render_product(r, base, include_stock=True) for r in rows]
                if args.format == "google-merchant":
                    for i, line in enumerate(to_google_tsv(products, base)):
                        if i or first:
                            out.write(line)
                else:
                    for rec in to_openai_jsonl(products, base):
                        out.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
                first = False
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def register(sub: Any) -> None:
    """Add ``catalog import`` and ``catalog export`` to the CLI."""
    parser = sub.add_parser("catalog", help="import and export a company's product catalogue")
    csub = parser.add_subparsers(dest="catalog_cmd", required=True)
    imp = csub.add_parser("import", parents=[common_parser()], help="import a product feed (idempotent by SKU)")
    imp.add_argument("--company", required=True, help="company slug or id")
    imp.add_argument("--format", choices=("csv", "google-tsv", "google-xml"), default=None,
                     help="feed format (default: from the file name and content)")  # fmt: skip
    imp.add_argument("--batch", type=int, default=1000, help="variants per transaction (default 1000)")
    imp.add_argument("file", help="the feed file (docs/catalog.md: the CSV header)")
    imp.set_defaults(func=cmd_import)
    exp = csub.add_parser("export", parents=[common_parser()], help="write a feed for buyer-agent platforms")
    exp.add_argument("--company", required=True, help="company slug or id")
    exp.add_argument("--format", required=True, choices=("google-merchant", "openai-jsonl"))
    exp.add_argument("--output", default=None, help="file to write (default stdout)")
    exp.set_defaults(func=cmd_export)

"""Bulk onboarding: ``ucp-gateway companies import FILE`` creates many companies with their first
signing keys, in batches, idempotent by slug.

The file is CSV (a header naming ``slug`` and any of ``name``, ``hosts``, ``tier``) or JSON Lines
(one object a line with those members); ``hosts`` is a list, or one string of names separated by
spaces, commas or semicolons. Every row is checked before anything is written (the rules of
``companies create``, a slug or hostname twice in the file, a hostname bound to another company):
a file with a bad row writes nothing and names the rows. Companies whose slug exists are skipped,
so an import that stopped half-way is finished by running it again.

Each batch is one transaction: one pipelined ``executemany`` of the statement ``companies create``
uses too (:data:`..tenancy.INSERT_COMPANY`, migration 0091), which writes a company's rows
(company, hostnames, sub-agents, first key and its ``create`` event) under that company's own
tenant context (``set_config`` local to the transaction, as :func:`..db.tenant_tx` does), so RLS
checks every row as for a single ``companies create``. The keys are generated before the
transaction opens. A batch that meets a slug or hostname taken meanwhile is rolled back and its
companies are created one transaction each, the taken ones reported.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from ..clibase import emit
from ..config import Settings
from ..db import open_database, platform_tx, tenant_tx
from ..errors import BadRequest, ConfigError
from ..tenancy import INSERT_COMPANY, CompanyRow, company_row, insert_company, insert_company_args
from .envelope import KekRing
from .repository import new_key

__all__ = ["ImportFileError", "ImportReport", "cmd_import", "import_companies", "parse_rows", "plan", "read_file"]

_SPLIT = re.compile(r"[\s,;]+")
_FIELDS = ("slug", "name", "hosts", "tier")
_MAX_ERRORS = 20  # rows named in one error message


class ImportFileError(BadRequest):
    """The file has rows that cannot be imported; nothing was written. ``errors``: ``[(line, why)]``."""

    code = "invalid_import_file"

    def __init__(self, errors: list[tuple[int, str]]):
        self.errors = errors
        shown = "; ".join(f"line {n}: {why}" for n, why in errors[:_MAX_ERRORS])
        more = f" (and {len(errors) - _MAX_ERRORS} more)" if len(errors) > _MAX_ERRORS else ""
        super().__init__(f"{len(errors)} row(s) cannot be imported, nothing was written: {shown}{more}")


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of the file as read: its line number and fields (not yet validated)."""

    line: int
    slug: str
    name: str
    hosts: tuple[str, ...]
    tier: str


@dataclass(slots=True)
class ImportReport:
    """What an import did: ``created`` and ``existing`` (skipped) slugs, ``conflicts`` (``{slug:
    why}``: taken by another writer meanwhile), first ``keys`` created, wall ``seconds``."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    conflicts: dict[str, str] = field(default_factory=dict)
    keys: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "created": len(self.created),
            "existing": len(self.existing),
            "conflicts": self.conflicts,
            "keys": self.keys,
            "seconds": round(self.seconds, 3),
        }


def _hosts(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(h for h in _SPLIT.split(value) if h)
    if isinstance(value, list) and all(isinstance(h, str) for h in value):
        return tuple(value)
    raise ValueError("hosts must be a list of strings or one string")


def _entry(line: int, obj: dict[str, Any]) -> Entry:
    slug = obj.get("slug")
    if not isinstance(slug, str) or not slug:
        raise ValueError("slug is required")
    name, tier = obj.get("name") or slug, obj.get("tier") or "starter"
    if not isinstance(name, str) or not isinstance(tier, str):
        raise ValueError("name and tier must be strings")
    return Entry(line, slug.strip(), name, _hosts(obj.get("hosts")), tier.strip())


def parse_rows(text: str, *, fmt: str | None = None) -> list[Entry]:
    """The entries of an import file's ``text`` (pure). ``fmt``: ``"csv"`` or ``"jsonl"``; None
    guesses (JSON Lines when the first non-blank character is ``{``). Blank lines are skipped.
    Raises ImportFileError naming every malformed row."""
    fmt = fmt or ("jsonl" if text.lstrip().startswith("{") else "csv")
    out: list[Entry] = []
    errors: list[tuple[int, str]] = []
    if fmt == "jsonl":
        for n, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                out.append(_entry(n, obj))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                errors.append((n, str(exc).split("\n")[0]))
    elif fmt == "csv":
        reader = csv.DictReader(io.StringIO(text))
        if "slug" not in (reader.fieldnames or ()):
            raise ImportFileError([(1, "the CSV header must name a slug column")])
        unknown = set(reader.fieldnames or ()) - set(_FIELDS)
        if unknown:
            raise ImportFileError([(1, f"unknown column(s) {', '.join(sorted(unknown))}")])
        for row in reader:
            n = reader.line_num
            if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue
            try:
                if None in row:
                    raise ValueError("more fields than the header names")
                out.append(_entry(n, row))
            except ValueError as exc:
                errors.append((n, str(exc)))
    else:
        raise ValueError(f"unknown import format {fmt!r}")
    if errors:
        raise ImportFileError(errors)
    return out


def plan(entries: Iterable[Entry]) -> list[tuple[Entry, CompanyRow]]:
    """Each entry validated as ``companies create`` would (pure): ``(entry, row to insert)``.
    Raises ImportFileError naming every invalid row, and a slug or hostname given twice."""
    out: list[tuple[Entry, CompanyRow]] = []
    errors: list[tuple[int, str]] = []
    slugs: dict[str, int] = {}
    hosts: dict[str, int] = {}
    for e in entries:
        try:
            row = company_row(slug=e.slug, display_name=e.name, hostnames=e.hosts, tier=e.tier)
        except BadRequest as exc:
            errors.append((e.line, exc.message))
            continue
        if (first := slugs.setdefault(row.company.slug, e.line)) != e.line:
            errors.append((e.line, f"slug {row.company.slug} is on line {first} already"))
            continue
        for h in row.company.hostnames:
            if (first := hosts.setdefault(h, e.line)) != e.line:
                errors.append((e.line, f"hostname {h} is on line {first} already"))
        out.append((e, row))
    if errors:
        raise ImportFileError(sorted(errors))
    return out


async def _directory(pool: asyncpg.Pool, rows: list[CompanyRow]) -> tuple[set[str], dict[str, str]]:
    """The slugs of ``rows`` that exist, and ``{hostname: slug}`` of their hostnames already bound."""
    slugs = [r.company.slug for r in rows]
    names = [h for r in rows for h in r.company.hostnames]
    async with platform_tx(pool) as conn:
        existing = {r["slug"] for r in await conn.fetch("SELECT slug FROM companies WHERE slug = ANY($1)", slugs)}
        bound = await conn.fetch(
            "SELECT h.hostname, c.slug FROM company_hosts h JOIN companies c ON c.id = h.company_id"
            " WHERE h.hostname = ANY($1)",
            names,
        )
    return existing, {r["hostname"]: r["slug"] for r in bound}


async def import_companies(
    pool: asyncpg.Pool,
    entries: list[Entry],
    *,
    ring: KekRing | None,
    now: dt.datetime,
    batch: int = 500,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Create the companies of ``entries`` that do not exist yet, each with its first active key
    (none without a KEK ``ring``: the scheduler makes it once one is configured), ``batch`` per
    transaction; ``progress(done, total)`` after each batch. Raises ImportFileError before
    writing anything when a row is invalid or names a hostname bound to another company."""
    started = time.monotonic()
    planned = plan(entries)
    report = ImportReport()
    existing, bound = await _directory(pool, [row for _, row in planned])
    errors = [
        (e.line, f"hostname {h} is bound to company {bound[h]}")
        for e, row in planned
        if row.company.slug not in existing
        for h in row.company.hostnames
        if h in bound and bound[h] != row.company.slug
    ]
    if errors:
        raise ImportFileError(errors)
    todo = [row for _, row in planned if row.company.slug not in existing]
    report.existing = [row.company.slug for _, row in planned if row.company.slug in existing]
    total = len(planned)
    if progress:
        progress(len(report.existing), total)
    for i in range(0, len(todo), batch):
        chunk = todo[i : i + batch]
        keys = [new_key(ring, row.id) if ring is not None else None for row in chunk]  # CPU, before the transaction
        try:
            async with pool.acquire() as conn, conn.transaction():
                rows = [insert_company_args(r, k, now) for r, k in zip(chunk, keys, strict=True)]
                await conn.executemany(INSERT_COMPANY, rows)
            report.created.extend(r.company.slug for r in chunk)
            report.keys += sum(k is not None for k in keys)
        except asyncpg.UniqueViolationError:  # created meanwhile by another writer: one at a time
            for row, key in zip(chunk, keys, strict=True):
                try:
                    async with tenant_tx(pool, row.id) as conn:
                        await insert_company(conn, row, key, now)
                except asyncpg.UniqueViolationError as exc:
                    what = "hostname" if "company_hosts" in (exc.table_name or "") else "slug"
                    report.conflicts[row.company.slug] = f"{what} taken meanwhile"
                    continue
                report.created.append(row.company.slug)
                report.keys += key is not None
        if progress:
            progress(len(report.existing) + len(report.created) + len(report.conflicts), total)
    report.seconds = time.monotonic() - started
    return report


def read_file(path: Path) -> list[Entry]:
    """The entries of the import file at ``path``: ``.jsonl``/``.ndjson`` is JSON Lines, ``.csv``
    CSV, another name is guessed from its content. Raises OSError, UnicodeDecodeError, ImportFileError."""
    suffix = path.suffix.lower()
    fmt = "jsonl" if suffix in (".jsonl", ".ndjson") else "csv" if suffix == ".csv" else None
    return parse_rows(path.read_text(encoding="utf-8-sig"), fmt=fmt)


class ProgressBar:
    """``[#####-----] done/total  rate/s`` redrawn in place on a terminal ``stream``; silent on
    anything else (a pipe or a file gets the summary only)."""

    WIDTH = 30

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.on = self.stream.isatty()
        self.started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if not self.on:
            return
        filled = self.WIDTH * done // max(total, 1)
        rate = done / max(time.monotonic() - self.started, 1e-6)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        self.stream.write(f"\r[{bar}] {done}/{total} companies  {rate:,.0f}/s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


async def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    """``ucp-gateway companies import FILE [--batch N]``: see the module docstring. Exit 0 when every
    row exists afterwards, 1 when some were taken meanwhile (listed). Raises BadRequest (an
    unreadable or invalid file: nothing written), which the CLI prints as an error (exit 1)."""
    from .vault import vault_of
    from .web import load_ring

    try:
        entries = read_file(Path(args.file))
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"cannot read {args.file}: {exc.__class__.__name__}") from None
    async with open_database(settings) as db:
        try:
            ring = vault_of(db.pool).ring if vault_of(db.pool) else load_ring(settings)
        except ConfigError:
            ring = None
            print("ucp-gateway: warning: no KEK ring configured; the companies' first keys come later", file=sys.stderr)
        report = await import_companies(
            db.pool, entries, ring=ring, now=dt.datetime.now(dt.UTC), batch=max(1, args.batch), progress=ProgressBar()
        )
    text = (
        f"imported {len(report.created)} companies ({report.keys} keys), {len(report.existing)} existed already,"
        f" in {report.seconds:.1f} s"
    )
    text += "".join(f"\n{slug}: {why}" for slug, why in report.conflicts.items())
    emit(args, report.to_json(), text)
    return 1 if report.conflicts else 0

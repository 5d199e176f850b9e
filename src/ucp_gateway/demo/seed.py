"""Seed the demo company from the packaged flower-shop CSV files.

Seeding is idempotent: rows that exist are left as they are (``ON CONFLICT DO NOTHING``), so seeding
twice changes nothing. ``reset=True`` deletes the demo company and everything it owns, as the owner
role, then seeds from scratch. Other subsystems add their demo state (keys, partners, verbs data)
through :data:`DEMO_SEEDERS`, called after the catalogue in the same order on every seed.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import asyncpg

from ..commerce.catalog_feed import FeedItem, parse_feed
from ..commerce.catalog_store import upsert_items
from ..commerce.demo import commerce_demo_seeder
from ..config import Settings
from ..db import Database, tenant_tx
from ..db.database import owner_connect
from ..errors import ConfigError
from ..tenancy import Company, CompanyNotFound, create_company, get_company
from ..verbs.demo.seed import demo_seeder as verbs_demo_seeder

__all__ = ["DEMO_HOSTNAMES", "DEMO_SEEDERS", "DEMO_SLUG", "Catalogue", "SeedReport", "load_catalogue", "seed_demo"]

DEMO_SLUG = "flower-shop"
DEMO_NAME = "Flower Shop"
DEMO_HOSTNAMES = ("127.0.0.1", "localhost")
DEMO_CURRENCY = "USD"

# async def seeder(db, company, settings) -> None; must be idempotent like the catalogue seed.
DEMO_SEEDERS: list[Callable[[Database, Company, Settings], Awaitable[None]]] = [
    verbs_demo_seeder,  # CRM contacts, back-office orders, a macro (verb runtime demo)
    commerce_demo_seeder,  # conformance_mode only: the suite's unsigned requests (development)
]


@dataclass(frozen=True, slots=True)
class Catalogue:
    """The demo CSV files as typed rows (money in minor units)."""

    catalog: list[FeedItem]  # catalog.csv: products with their variants and stock (catalog import format)
    discounts: list[dict[str, Any]]
    promotions: list[dict[str, Any]]
    shipping_rates: list[dict[str, Any]]
    customers: list[dict[str, Any]]
    addresses: list[dict[str, Any]]
    payment_instruments: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class SeedReport:
    company: Company
    created: bool
    inserted: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"company": self.company.to_json(), "created": self.created, "inserted": self.inserted}


def _read(name: str) -> list[dict[str, str]]:
    data = resources.files("ucp_gateway.demo").joinpath("data", f"{name}.csv").read_text("utf-8")
    return [{k: (v or "").strip() for k, v in row.items()} for row in csv.DictReader(data.splitlines())]


def _read_catalog() -> list[FeedItem]:
    data = resources.files("ucp_gateway.demo").joinpath("data", "catalog.csv").read_bytes()
    items, errors = parse_feed(data, "csv")
    if errors:
        raise ValueError(f"demo catalog.csv: {errors[0]}")
    return items


def load_catalogue() -> Catalogue:
    """Parse the packaged CSV files. Raises ValueError on a malformed row (a packaging bug)."""
    return Catalogue(
        catalog=_read_catalog(),
        discounts=[{**r, "code": r["code"].upper(), "value": int(r["value"])} for r in _read("discounts")],
        promotions=[
            {
                **r,
                "min_subtotal": int(r["min_subtotal"]) if r["min_subtotal"] else None,
                "eligible_item_ids": json.loads(r["eligible_item_ids"]) if r["eligible_item_ids"] else [],
            }
            for r in _read("promotions")
        ],
        shipping_rates=[{**r, "price": int(r["price"])} for r in _read("shipping_rates")],
        customers=_read("customers"),
        addresses=_read("addresses"),
        payment_instruments=_read("payment_instruments"),
    )


async def _insert(conn: asyncpg.Connection, table: str, cols: list[str], rows: list[tuple]) -> int:
    if not rows:
        return 0
    collist = ", ".join(cols)
    params = ", ".join(f"${i + 1}" for i in range(len(cols)))
    stmt = f"INSERT INTO {table} ({collist}) VALUES ({params}) ON CONFLICT DO NOTHING RETURNING 1"
    n = 0
    for row in rows:
        if await conn.fetchval(stmt, *row):
            n += 1
    return n


async def _seed_catalogue(conn: asyncpg.Connection, cid, cat: Catalogue) -> dict[str, int]:
    c = DEMO_CURRENCY
    # the catalogue import's own path, in keep mode: existing items keep their price, title and stock
    counts, errors = await upsert_items(conn, cid, cat.catalog, keep=True)
    if errors:
        raise ValueError(f"demo catalog.csv: {errors[0]}")
    return {
        "catalog_products": counts["products_inserted"],
        "products": counts["variants_inserted"],
        "inventory": counts["stock_set"],
        "discounts": await _insert(
            conn,
            "discounts",
            ["company_id", "code", "type", "value", "currency", "description"],
            [
                (cid, d["code"], d["type"], d["value"], c if d["type"] == "fixed_amount" else None, d["description"])
                for d in cat.discounts
            ],
        ),
        "promotions": await _insert(
            conn,
            "promotions",
            ["company_id", "id", "type", "min_subtotal", "eligible_item_ids", "description"],
            [
                (cid, p["id"], p["type"], p["min_subtotal"], p["eligible_item_ids"], p["description"])
                for p in cat.promotions
            ],
        ),
        "shipping_rates": await _insert(
            conn,
            "shipping_rates",
            ["company_id", "id", "country_code", "service_level", "price", "currency", "title"],
            [
                (cid, s["id"], s["country_code"], s["service_level"], s["price"], c, s["title"])
                for s in cat.shipping_rates
            ],
        ),
        "customers": await _insert(
            conn,
            "customers",
            ["company_id", "id", "name", "email"],
            [(cid, r["id"], r["name"], r["email"]) for r in cat.customers],
        ),
        "addresses": await _insert(
            conn,
            "addresses",
            ["company_id", "id", "customer_id", "street_address", "city", "state", "postal_code", "country"],
            [
                (
                    cid,
                    a["id"],
                    a["customer_id"],
                    a["street_address"],
                    a["city"],
                    a["state"],
                    a["postal_code"],
                    a["country"],
                )
                for a in cat.addresses
            ],
        ),
        "payment_instruments": await _insert(
            conn,
            "payment_instruments",
            ["company_id", "id", "type", "brand", "last_digits", "token", "handler_id"],
            [
                (cid, p["id"], p["type"], p["brand"], p["last_digits"], p["token"], p["handler_id"])
                for p in cat.payment_instruments
            ],
        ),
    }


async def _delete_company_everywhere(owner_dsn: str, company_id) -> None:
    """Remove one company and every row that names it, as the owner, in one transaction.

    ``session_replication_role = replica`` disables triggers (foreign keys and the audit log's
    append-only guard) for this transaction only; it needs a superuser, which the embedded server's
    owner is. Used only by ``demo seed --reset``.
    """
    conn = await owner_connect(owner_dsn)
    try:
        async with conn.transaction():
            try:
                await conn.execute("SET LOCAL session_replication_role = replica")
            except asyncpg.InsufficientPrivilegeError:
                raise ConfigError("demo seed --reset needs a superuser DATABASE_URL (it bypasses triggers)") from None
            tables = await conn.fetch(
                "SELECT c.table_name FROM information_schema.columns c "
                "JOIN information_schema.tables t USING (table_schema, table_name) "
                "WHERE c.table_schema = 'public' AND c.column_name = 'company_id' AND t.table_type = 'BASE TABLE'"
            )
            for t in tables:
                await conn.execute(f'DELETE FROM "{t["table_name"]}" WHERE company_id = $1', company_id)
            await conn.execute("DELETE FROM companies WHERE id = $1", company_id)
    finally:
        await conn.close()


async def seed_demo(db: Database, settings: Settings, *, reset: bool = False) -> SeedReport:
    """Create (or complete) the demo company ``flower-shop`` bound to 127.0.0.1 and localhost.

    Returns: a :class:`SeedReport` with per-table counts of rows inserted now (all zero on a re-seed).
    Raises: ConfigError when ``reset`` is asked for but the owner may not disable triggers.
    """
    if reset:
        try:
            old = await get_company(db.pool, DEMO_SLUG)
            await _delete_company_everywhere(db.owner_dsn, old.id)
        except CompanyNotFound:
            pass
    created = False
    try:
        company = await get_company(db.pool, DEMO_SLUG)
    except CompanyNotFound:
        company = await create_company(
            db.pool, slug=DEMO_SLUG, display_name=DEMO_NAME, hostnames=DEMO_HOSTNAMES, tier="enterprise"
        )
        created = True
    async with tenant_tx(db.pool, company.id) as conn:
        inserted = await _seed_catalogue(conn, company.id, load_catalogue())
    for seeder in DEMO_SEEDERS:
        await seeder(db, company, settings)
    return SeedReport(company=company, created=created, inserted=inserted)

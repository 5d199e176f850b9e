"""Fixtures for the verb runtime: the flower-shop company with its catalogue and demo rows, a
frozen clock, and a dispatcher on the real test database."""

from __future__ import annotations

import csv
import dataclasses
import json
from datetime import UTC, datetime
from importlib import resources

import pytest

from ucp_gateway.clock import FrozenClock
from ucp_gateway.commerce.catalog_store import upsert_items
from ucp_gateway.db import tenant_tx
from ucp_gateway.demo.seed import load_catalogue
from ucp_gateway.tenancy import create_company
from ucp_gateway.verbs import Call, Dispatcher, Principal, build_registry
from ucp_gateway.verbs.demo import seed_verb_demo

T0 = datetime(2026, 4, 8, 12, 0, tzinfo=UTC)


def _rows(name: str) -> list[dict[str, str]]:
    text = resources.files("ucp_gateway").joinpath("demo/data").joinpath(name).read_text("utf-8")
    return list(csv.DictReader(text.splitlines()))


async def load_catalog(pool, company_id) -> None:
    """The flower-shop CSVs into the catalogue tables (what the lead's demo seed does)."""
    async with tenant_tx(pool, company_id) as c:
        await upsert_items(c, company_id, load_catalogue().catalog)  # products, variants, stock
        for r in _rows("discounts.csv"):
            await c.execute(
                "INSERT INTO discounts (company_id, code, type, value, currency, description) "
                "VALUES ($1,$2,$3,$4,$5,$6)",
                company_id,
                r["code"],
                r["type"],
                int(r["value"]),
                "USD" if r["type"] == "fixed_amount" else None,
                r["description"],
            )
        for r in _rows("promotions.csv"):
            await c.execute(
                "INSERT INTO promotions (company_id, id, type, min_subtotal, eligible_item_ids, description) "
                "VALUES ($1,$2,$3,$4,$5,$6)",
                company_id,
                r["id"],
                r["type"],
                int(r["min_subtotal"]) if r["min_subtotal"] else None,
                json.loads(r["eligible_item_ids"]) if r["eligible_item_ids"] else [],
                r["description"],
            )
        for r in _rows("shipping_rates.csv"):
            await c.execute(
                "INSERT INTO shipping_rates (company_id, id, country_code, service_level, price, title) "
                "VALUES ($1,$2,$3,$4,$5,$6)",
                company_id,
                r["id"],
                r["country_code"],
                r["service_level"],
                int(r["price"]),
                r["title"],
            )
        for r in _rows("customers.csv"):
            await c.execute("INSERT INTO customers VALUES ($1,$2,$3,$4)", company_id, r["id"], r["name"], r["email"])
        for r in _rows("addresses.csv"):
            await c.execute(
                "INSERT INTO addresses VALUES ($1,$2,$3,$4,$5,$6,$7,$8)",
                company_id,
                r["id"],
                r["customer_id"],
                r["street_address"],
                r["city"],
                r["state"],
                r["postal_code"],
                r["country"],
            )
        for r in _rows("payment_instruments.csv"):
            await c.execute(
                "INSERT INTO payment_instruments VALUES ($1,$2,$3,$4,$5,$6,$7)",
                company_id,
                r["id"],
                r["type"],
                r["brand"],
                r["last_digits"],
                r["token"],
                r["handler_id"],
            )


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(T0)


@pytest.fixture(scope="session")
async def template_db(template_db, pg_base_dsn):
    """The migrated template plus the flower-shop company, its catalogue and the verb demo rows,
    built once per session (every verbs test then clones it instead of seeding again)."""
    import asyncpg

    from ucp_gateway.db.database import _init_connection
    from ucp_gateway.db.dsn import with_database

    name = f"{template_db}_shop"
    admin = await asyncpg.connect(pg_base_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
        pool = await asyncpg.create_pool(
            with_database(pg_base_dsn, name), min_size=1, max_size=2, init=_init_connection
        )
        try:
            company = await create_company(
                pool,
                slug="flower-shop",
                display_name="Flower Shop",
                hostnames=["flower-shop.test"],
                tier="growth",
                signature_policy="optional",  # staff call with bearer tokens; signed agents are verified
            )
            await load_catalog(pool, company.id)
            await seed_verb_demo(pool, company.id, T0)
        finally:
            await pool.close()
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def shop(database):
    from ucp_gateway.tenancy import get_company

    return await get_company(database.pool, "flower-shop")


@pytest.fixture
def registry():
    return build_registry()


@pytest.fixture
def dispatcher(database, db_settings, clock, registry) -> Dispatcher:
    return Dispatcher(registry, database.pool, db_settings, clock)


def staff(
    company, role: str = "owner", subject: str = "alice", transport: str = "http", human: bool = False
) -> Principal:
    """A staff caller; ``human``: on the human channel (the approval page), else a bearer token."""
    return Principal("staff", company.id, role, subject, transport, human)


async def run(d: Dispatcher, principal: Principal, verb: str, args=None, **kw) -> dict:
    return await d.dispatch(principal, Call(verb, args or {}, **kw))


def human(principal: Principal) -> Principal:
    """The same person on the human channel (a staff browser session confirming an approval): where
    the typed phrase of a human-only verb is entered (verbs/approvals.py)."""
    return dataclasses.replace(principal, human=True)


async def confirm_phrase(d: Dispatcher, principal: Principal, verb: str, args: dict, **kw) -> dict:
    """Preflight, then confirm with the exact phrase and nonce, as a person on the human channel
    (a bearer-token caller cannot confirm a human-only verb: test_human_channel.py)."""
    principal = human(principal)
    pre = await run(d, principal, verb, args)
    assert pre["error"]["reason"] == "dispatch_pending", pre
    p = pre["pending"]
    return await run(d, principal, verb, args, confirm=True, typed_phrase=p["required_phrase"], nonce=p["nonce"], **kw)

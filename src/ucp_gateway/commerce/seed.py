"""Import the flower-shop demo catalogue (CSV, ``ucp_gateway/demo/data``) into a company's tables.

Idempotent (upserts). Used by tests, the benchmark and ``serve --demo`` when the demo seed asks.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import asyncpg

__all__ = ["DEMO_DATA", "import_catalog"]

DEMO_DATA = Path(__file__).resolve().parent.parent / "demo" / "data"


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with (data_dir / name).open(encoding="utf-8", newline="") as f:
        return [{k: (v or "").strip() for k, v in r.items()} for r in csv.DictReader(f)]


async def import_catalog(conn: asyncpg.Connection, company_id, data_dir: Path = DEMO_DATA) -> None:
    """Upsert products, inventory, codes, promotions, rates, customers, addresses, instruments.

    ``conn`` must be inside ``tenant_tx(pool, company_id)``. Prices are minor units (USD).
    """
    for r in _rows(data_dir, "products.csv"):
        await conn.execute(
            "INSERT INTO products (company_id, id, title, price, image_url) VALUES ($1,$2,$3,$4,$5)"
            " ON CONFLICT (company_id, id) DO UPDATE SET title = $3, price = $4, image_url = $5",
            company_id,
            r["id"],
            r["title"],
            int(r["price"]),
            r["image_url"] or None,
        )
    for r in _rows(data_dir, "inventory.csv"):
        await conn.execute(
            "INSERT INTO inventory (company_id, product_id, quantity) VALUES ($1,$2,$3)"
            " ON CONFLICT (company_id, product_id) DO UPDATE SET quantity = $3",
            company_id,
            r["product_id"],
            int(r["quantity"]),
        )
    for r in _rows(data_dir, "discounts.csv"):
        await conn.execute(
            "INSERT INTO discounts (company_id, code, type, value, currency,"
            " description) VALUES ($1,$2,$3,$4,$5,$6)"
            " ON CONFLICT (company_id, code) DO UPDATE SET type = $3, value = $4,"
            " currency = $5, description = $6",
            company_id,
            r["code"].upper(),
            r["type"],
            int(r["value"]),
            "USD" if r["type"] == "fixed_amount" else None,
            r["description"],
        )
    for r in _rows(data_dir, "promotions.csv"):
        items = json.loads(r["eligible_item_ids"]) if r["eligible_item_ids"] else []
        await conn.execute(
            "INSERT INTO promotions (company_id, id, type, min_subtotal, eligible_item_ids, description)"
            " VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (company_id, id) DO UPDATE SET type = $3,"
            " min_subtotal = $4, eligible_item_ids = $5, description = $6",
            company_id,
            r["id"],
            r["type"],
            int(r["min_subtotal"]) if r["min_subtotal"] else None,
            items,
            r["description"],
        )
    for r in _rows(data_dir, "shipping_rates.csv"):
        await conn.execute(
            "INSERT INTO shipping_rates (company_id, id, country_code, service_level, price, title)"
            " VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (company_id, id) DO UPDATE SET country_code = $3,"
            " service_level = $4, price = $5, title = $6",
            company_id,
            r["id"],
            r["country_code"],
            r["service_level"],
            int(r["price"]),
            r["title"],
        )
    for r in _rows(data_dir, "customers.csv"):
        await conn.execute(
            "INSERT INTO customers (company_id, id, name, email) VALUES ($1,$2,$3,$4)"
            " ON CONFLICT (company_id, id) DO UPDATE SET name = $3, email = $4",
            company_id,
            r["id"],
            r["name"],
            r["email"],
        )
    for r in _rows(data_dir, "addresses.csv"):
        await conn.execute(
            "INSERT INTO addresses (company_id, id, customer_id, street_address,"
            " city, state, postal_code, country)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (company_id, id) DO UPDATE SET customer_id = $3,"
            " street_address = $4, city = $5, state = $6, postal_code = $7, country = $8",
            company_id,
            r["id"],
            r["customer_id"],
            r["street_address"],
            r["city"],
            r["state"],
            r["postal_code"],
            r["country"],
        )
    for r in _rows(data_dir, "payment_instruments.csv"):
        await conn.execute(
            "INSERT INTO payment_instruments (company_id, id, type, brand, last_digits, token, handler_id)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT (company_id, id) DO UPDATE SET type = $3, brand = $4,"
            " last_digits = $5, token = $6, handler_id = $7",
            company_id,
            r["id"],
            r["type"],
            r["brand"],
            r["last_digits"],
            r["token"],
            r["handler_id"],
        )

"""Demo rows behind the verbs for a company whose catalogue is loaded (flower shop): CRM contacts
from customers, four back-office orders priced from the catalogue, and one saved macro.

Idempotent: does nothing when the company already has orders.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

import asyncpg

from ...db import tenant_tx
from .pricing import price_order

__all__ = ["demo_seeder", "seed_verb_demo"]

# (order id, customer, [(product, qty)], discount code, shipping rate, days ago)
_ORDERS = [
    ("ord_1", "cust_1", [("bouquet_roses", 2), ("pot_ceramic", 1)], "10OFF", "std-ship", 20),
    ("ord_2", "cust_1", [("orchid_white", 3)], None, "exp-ship-us", 9),
    ("ord_3", "cust_2", [("bouquet_sunflowers", 1)], "FIXED500", "std-ship", 5),
    ("ord_4", "cust_3", [("bouquet_tulips", 1), ("gardenias", 1)], None, "std-ship", 2),
]


async def seed_verb_demo(pool: asyncpg.Pool, company_id: UUID, now: datetime) -> int:
    """Insert the demo rows; returns the number of orders created (0 when already seeded)."""
    async with tenant_tx(pool, company_id) as c:
        if await c.fetchval("SELECT count(*) FROM sales_orders"):
            return 0
        for i, cu in enumerate(await c.fetch("SELECT id, name, email FROM customers ORDER BY id")):
            await c.execute(
                "INSERT INTO crm_contacts (company_id, customer_id, name, email, status, updated_at) "
                "VALUES ($1, $2, $3, $4, $5, $6)",
                company_id,
                cu["id"],
                cu["name"],
                cu["email"],
                "lost" if i == 2 else "active",
                now,
            )
        prices = {r["id"]: r["price"] for r in await c.fetch("SELECT id, price FROM products")}
        promos = [dict(p) for p in await c.fetch("SELECT id, type, min_subtotal, eligible_item_ids FROM promotions")]
        made = 0
        for oid, cust, items, code, rate_id, ago in _ORDERS:
            if cust not in {r["id"] for r in await c.fetch("SELECT id FROM customers")} or any(
                p not in prices for p, _ in items
            ):
                continue
            lines = [{"product_id": p, "quantity": q, "unit_price": prices[p]} for p, q in items]
            disc = await c.fetchrow("SELECT code, type, value FROM discounts WHERE code = $1", code)
            rate = await c.fetchrow("SELECT id, title, price FROM shipping_rates WHERE id = $1", rate_id)
            b = price_order(lines, dict(disc) if disc else None, dict(rate) if rate else None, promos)
            await c.execute(
                "INSERT INTO sales_orders (company_id, id, customer_id, currency, discount_code, "
                "shipping_rate_id, status, paid_amount, created_at) VALUES ($1,$2,$3,'USD',$4,$5,'paid',$6,$7)",
                company_id,
                oid,
                cust,
                disc["code"] if disc else None,
                rate_id if rate else None,
                b.total,
                now - timedelta(days=ago),
            )
            for n, ln in enumerate(lines, 1):
                await c.execute(
                    "INSERT INTO sales_order_lines (company_id, order_id, line_no, product_id, quantity, "
                    "unit_price) VALUES ($1,$2,$3,$4,$5,$6)",
                    company_id,
                    oid,
                    n,
                    ln["product_id"],
                    ln["quantity"],
                    ln["unit_price"],
                )
            made += 1
        first = await c.fetchval("SELECT min(id) FROM crm_contacts")
        if first is not None:
            steps = [
                {
                    "verb": "crm_contact_update",
                    "args": {"contact_id": first, "status": "vip", "notes": "VIP follow-up"},
                },
                {
                    "verb": "discount_create",
                    "args": {
                        "code": "VIPTHANKS",
                        "type": "percentage",
                        "value": 15,
                        "description": "VIP thank-you",
                    },
                },
            ]
            await c.execute(
                "INSERT INTO macros (company_id, id, name, steps, created_at) VALUES ($1, 'vip_followup', "
                "'VIP follow-up', $2::jsonb, $3) ON CONFLICT DO NOTHING",
                company_id,
                steps,
                now,
            )
    return made


async def demo_seeder(db, company, settings) -> None:
    """``ucp_gateway.demo.DEMO_SEEDERS`` entry: seed the verb demo rows (idempotent)."""
    from ...clock import SystemClock

    await seed_verb_demo(db.pool, company.id, SystemClock().now())

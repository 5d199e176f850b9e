"""Order webhook events written straight into a gateway's embedded database, as an order's own
transaction writes them (``commerce.repo.insert_outbox``), for the demo company."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from ucp_gateway.commerce.repo import insert_outbox


def owner_dsn(data_dir: Path) -> str:
    return f"postgresql://postgres:@/ucp_gateway?host={data_dir / 'pg'}"


async def queue_events(data_dir: Path, targets: list[tuple[str, str]], *, slug: str = "flower-shop") -> list[str]:
    """One event per ``(receiver name, target URL)``; the receiver's caller is its own platform
    profile. Returns the Webhook-Ids in order."""
    conn = await asyncpg.connect(owner_dsn(data_dir))
    try:
        company_id = await conn.fetchval("SELECT id FROM companies WHERE slug = $1", slug)
        ids = []
        async with conn.transaction():
            await conn.execute("SELECT set_config('app.company_id', $1, true)", str(company_id))
            for i, (name, target) in enumerate(targets):
                eid = await insert_outbox(
                    conn,
                    company_id,
                    order_id=f"ord_{name}_{i}",
                    event_type="order.created",
                    caller=f"https://{name}.platform.test/profile",
                    payload={"id": f"ord_{name}_{i}"},
                    target_url=target,
                    now=datetime.now(UTC),
                )
                ids.append(str(eid))
        return ids
    finally:
        await conn.close()

"""Counters of signature policy ``log``: what it served that ``required`` would have refused.

One row per (company, UTC day, reason) in ``access_policy_counts`` (migration 0070), incremented in
the request's own tenant transaction; company admins read them (``GET /admin/v1/access``). Shared by
every replica, since they live in PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from uuid import UUID

import asyncpg

from ..db import tenant_tx

__all__ = ["count_refusal", "refusal_counts"]

_MAX_REASON = 64


async def count_refusal(pool: asyncpg.Pool, company_id: UUID, day: dt.date, reason: str) -> None:
    """Add one to the counter of ``reason`` (a wire code, cut to 64 characters) on ``day`` (UTC)."""
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute(
            "INSERT INTO access_policy_counts (company_id, day, reason, count) VALUES ($1, $2, $3, 1)"
            " ON CONFLICT (company_id, day, reason) DO UPDATE SET count = access_policy_counts.count + 1",
            company_id,
            day,
            reason[:_MAX_REASON] or "unknown",
        )


async def refusal_counts(pool: asyncpg.Pool, company_id: UUID, since: dt.date) -> list[dict[str, Any]]:
    """``[{"day": "YYYY-MM-DD", "reason": code, "count": n}]`` from ``since`` on, newest day first."""
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch(
            "SELECT day, reason, count FROM access_policy_counts WHERE day >= $1 ORDER BY day DESC, reason",
            since,
        )
    return [{"day": r["day"].isoformat(), "reason": r["reason"], "count": r["count"]} for r in rows]

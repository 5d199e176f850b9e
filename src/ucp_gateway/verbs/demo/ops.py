"""Ops verbs: events.subscribe and events.poll (subscribe shape; cursor polling, digest §8 G25).

Cursors are opaque (``c_<n>``) and monotonic; a subscription belongs to the principal that made it
and lapses after 24 h without a poll.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from ..audit import iso
from ..context import VerbContext
from ..errors import VerbError
from ..policy import RiskClass, VerbPolicy
from ..registry import Registry
from .common import obj

__all__ = ["provide"]

IDLE = timedelta(hours=24)
_FILTER = (
    "($1::text[] IS NULL OR type = ANY($1)) AND ($2::text IS NULL OR entity_type = $2) "
    "AND ($3::text IS NULL OR entity_id = $3)"
)


def _event(r) -> dict[str, Any]:
    return {
        "seq": r["seq"],
        "type": r["type"],
        "entity_type": r["entity_type"],
        "entity_id": r["entity_id"],
        "data": r["data"],
        "at": iso(r["created_at"]),
    }


def _params(f: dict[str, Any]) -> tuple[Any, Any, Any]:
    return f.get("event_types"), f.get("entity_type"), f.get("entity_id")


async def _subscribe(ctx: VerbContext) -> dict[str, Any]:
    f = {k: ctx.args[k] for k in ("event_types", "entity_type", "entity_id") if k in ctx.args}
    head = await ctx.conn.fetchval("SELECT coalesce(max(seq), 0) FROM agent_events")
    recent = await ctx.conn.fetch(f"SELECT * FROM agent_events WHERE {_FILTER} ORDER BY seq DESC LIMIT 10", *_params(f))
    sid = "sub_" + secrets.token_hex(6)
    await ctx.conn.execute(
        "INSERT INTO agent_subscriptions (company_id, id, principal, filters, created_at, last_polled_at) "
        "VALUES ($1, $2, $3, $4::jsonb, $5, $5)",
        ctx.company.id,
        sid,
        ctx.principal.key,
        f,
        ctx.now,
    )
    return {
        "subscription_id": sid,
        "cursor": f"c_{head}",
        "filters": f,
        "initial_events": [_event(r) for r in reversed(recent)],
    }


async def _poll(ctx: VerbContext) -> dict[str, Any]:
    a = ctx.args
    sub = await ctx.conn.fetchrow(
        "SELECT filters, last_polled_at FROM agent_subscriptions WHERE id = $1 AND principal = $2",
        a["subscription_id"],
        ctx.principal.key,
    )
    if sub is None or ctx.now - sub["last_polled_at"] > IDLE:
        raise VerbError(
            "not_found",
            "unknown or lapsed subscription",
            path="$.subscription_id",
            hint="Call events.subscribe again.",
        )
    after, limit = int(a["cursor"][2:]), int(a.get("limit", 100))
    rows = await ctx.conn.fetch(
        f"SELECT * FROM agent_events WHERE {_FILTER} AND seq > $4 ORDER BY seq LIMIT $5",
        *_params(sub["filters"]),
        after,
        limit + 1,
    )
    page = rows[:limit]
    await ctx.conn.execute(
        "UPDATE agent_subscriptions SET last_polled_at = $2 WHERE id = $1", a["subscription_id"], ctx.now
    )
    cursor = f"c_{page[-1]['seq']}" if page else a["cursor"]
    return {
        "subscription_id": a["subscription_id"],
        "cursor": cursor,
        "events": [_event(r) for r in page],
        "has_more": len(rows) > limit,
        "filters": sub["filters"],
    }


def provide(registry: Registry) -> None:
    r = registry.register
    r(
        {
            "name": "events.subscribe",
            "shape": "subscribe",
            "description": "Watch business events (crm.contact.updated, payment.refunded, inventory.adjusted, ...) "
            "without websockets: returns a subscription id, a cursor and the 10 latest matching events. "
            "Then call events.poll with the cursor.",
            "input_schema": obj(
                [],
                event_types={"type": "array", "items": {"type": "string"}, "maxItems": 20},
                entity_type={"type": "string"},
                entity_id={"type": "string"},
            ),
        },
        VerbPolicy(RiskClass.READ, subagent="ops"),
        _subscribe,
    )
    r(
        {
            "name": "events.poll",
            "shape": "subscribe",
            "description": "Fetch events after a cursor for a subscription (at most limit, default 100); returns the "
            "next cursor and has_more.",
            "input_schema": obj(
                ["subscription_id", "cursor"],
                subscription_id={"type": "string", "pattern": "^sub_[0-9a-f]{12}$"},
                cursor={"type": "string", "pattern": "^c_[0-9]{1,18}$"},
                limit={"type": "integer", "minimum": 1, "maximum": 100},
            ),
        },
        VerbPolicy(RiskClass.READ, subagent="ops"),
        _poll,
    )

"""``ucp-gateway webhooks status|dead|retry``: the order-webhook queue from the shell (staff).

- ``webhooks status``: queue depth, events due now, age of the oldest undelivered one (every company).
- ``webhooks dead --company SLUG``: the company's dead-lettered events (retry budget spent or target
  refused), newest first, with their last error.
- ``webhooks retry --company SLUG ID``: give one dead-lettered event a new retry budget (same
  Webhook-Id and body), due now.
"""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime
from typing import Any

from ..clibase import common_parser, emit
from ..config import Settings
from ..db import open_database
from ..errors import BadRequest, NotFound
from ..tenancy import get_company
from .webhook_queue import dead_letters, queue_stats, requeue

__all__ = ["cmd_webhooks", "register"]


async def cmd_webhooks(args: argparse.Namespace, settings: Settings) -> int:
    """Run one ``webhooks`` sub-command. Raises GatewayError on bad input (printed by cli.py)."""
    now = datetime.now(UTC)
    async with open_database(settings) as db:
        if args.webhooks_cmd == "status":
            s = await queue_stats(db.pool, now=now)
            data = {"depth": s.depth, "due": s.due, "oldest_age_seconds": round(s.oldest_age, 3)}
            emit(args, data, f"queued={s.depth} due={s.due} oldest_age={s.oldest_age:.1f}s")
            return 0
        company = await get_company(db.pool, args.company)
        if args.webhooks_cmd == "dead":
            rows = await dead_letters(db.pool, company.id, limit=args.limit)
            lines = [
                f"{r['id']}\t{r['order_id']}\t{r['event_type']}\tattempts={r['attempts']}\t"
                f"dead_at={r['dead_at'].isoformat()}\t{r['last_error'] or ''}"
                for r in rows
            ]
            emit(args, {"company": company.slug, "dead": rows}, "\n".join(lines) or "no dead-lettered webhooks")
            return 0
        try:
            event_id = uuid.UUID(args.id)
        except ValueError:
            raise BadRequest(f"not a webhook id: {args.id!r}") from None
        if not await requeue(db.pool, company.id, event_id, now=now):
            raise NotFound(f"no dead-lettered webhook {event_id} at {company.slug}")
        emit(args, {"requeued": str(event_id)}, f"requeued {event_id}")
    return 0


def register(sub: Any) -> None:
    """Add the ``webhooks`` command to the CLI's sub-parsers."""
    parser = sub.add_parser("webhooks", help="order-webhook delivery: queue status, dead letters, retry")
    wsub = parser.add_subparsers(dest="webhooks_cmd", required=True)
    shared = [common_parser()]
    status = wsub.add_parser("status", parents=shared, help="queue depth, due now, oldest undelivered age")
    status.set_defaults(func=cmd_webhooks)
    dead = wsub.add_parser("dead", parents=shared, help="a company's dead-lettered webhooks, newest first")
    dead.add_argument("--company", required=True, help="company slug or id")
    dead.add_argument("--limit", type=int, default=100)
    dead.set_defaults(func=cmd_webhooks)
    retry = wsub.add_parser("retry", parents=shared, help="requeue one dead-lettered webhook (new retry budget)")
    retry.add_argument("--company", required=True, help="company slug or id")
    retry.add_argument("id", help="the Webhook-Id")
    retry.set_defaults(func=cmd_webhooks)

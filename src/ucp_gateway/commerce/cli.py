"""CLI: ``ucp-gateway orders list|show --company SLUG``: the staff view of real UCP orders
(:mod:`.staff`), read in the company's tenant transaction. ``--json`` prints the admin API's JSON."""

from __future__ import annotations

import argparse

from ..clibase import common_parser, emit
from ..config import Settings
from ..db import open_database, tenant_tx
from ..tenancy import get_company

__all__ = ["register"]


def _money(amount: int, currency: str) -> str:
    return f"{amount / 100:.2f} {currency}" if currency not in ("JPY", "KRW") else f"{amount} {currency}"


def _list_text(page: dict) -> str:
    if not page["orders"]:
        return "no orders"
    lines = [f"{'order':38} {'label':10} {'total':>14} {'webhooks':>9}  created_at  platform"]
    for o in page["orders"]:
        w = o["webhooks"]
        hooks = f"{w['delivered']}/{w['delivered'] + w['queued'] + w['dead']}"
        if w["dead"]:
            hooks += f" ({w['dead']} dead)"
        lines.append(
            f"{o['id']:38} {o['label'] or '':10} {_money(o['total'], o['currency']):>14} {hooks:>9}"
            f"  {o['created_at']}  {o['platform']}"
        )
    if page["next_cursor"]:
        lines.append(f"more: --cursor {page['next_cursor']}")
    return "\n".join(lines)


def _show_text(view: dict) -> str:
    o = view["order"]
    cur = o["currency"]
    lines = [f"order {o['id']} {o['label']}  placed {view['created_at']} by {view['platform']}"]
    for li in o["line_items"]:
        q = li["quantity"]
        lines.append(f"  {q['total']} x {li['item'].get('title') or li['item']['id']}  ({li['status']})")
    lines += [f"  {t['type']}: {_money(t['amount'], cur)}" for t in o["totals"]]
    lines += [f"  event {e['occurred_at']} {e['type']}" for e in o["fulfillment"]["events"]]
    lines += [f"  adjustment {a['occurred_at']} {a['type']} {a['status']}" for a in o["adjustments"]]
    lines += [f"  payment {p['id']} {p['status']} {_money(p['amount'], p['currency'])}" for p in view["payments"]]
    lines += [
        f"  webhook {w['webhook_id']} {w['event_type']} {w['state']} after {w['attempts']} attempt(s)"
        + (f": {w['last_error']}" if w["last_error"] and w["state"] != "delivered" else "")
        for w in view["webhooks"]
    ]
    return "\n".join(lines)


async def cmd_orders(args: argparse.Namespace, settings: Settings) -> int:
    # imported here: the staff views pull in the whole commerce service, which every other
    # command of the CLI would otherwise import at start (~0.14 s of each process)
    from .staff import list_orders, show_order

    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        async with tenant_tx(db.pool, company.id) as conn:
            if args.orders_cmd == "list":
                page = await list_orders(conn, limit=args.limit, cursor=args.cursor)
                emit(args, page, _list_text(page))
            else:
                view = await show_order(conn, args.order_id)
                emit(args, view, _show_text(view))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``orders list|show``."""
    orders = sub.add_parser("orders", help="staff view of the company's UCP orders")
    osub = orders.add_subparsers(dest="orders_cmd", required=True)
    p = osub.add_parser("list", help="orders, newest first", parents=[common_parser()])
    p.add_argument("--company", required=True, help="company slug or id")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--cursor")
    p.set_defaults(func=cmd_orders)
    p = osub.add_parser("show", help="one order, its events, payments, webhooks", parents=[common_parser()])
    p.add_argument("--company", required=True, help="company slug or id")
    p.add_argument("order_id")
    p.set_defaults(func=cmd_orders)

"""CLI: ``verbs list``, ``verbs seed-demo``, ``agent dispatch`` and ``audit verify``.

``agent dispatch`` runs the local dispatcher as a staff principal of the given role on transport
``cli`` (solid-verbs spec/transport.md CLI binding: ``--confirm`` and ``--phrase``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..clibase import common_parser
from ..clock import SystemClock
from ..config import Settings
from ..db import open_database, tenant_tx
from ..errors import BadRequest
from ..tenancy import get_company
from .audit import verify_chain
from .decide import Call
from .dispatcher import Dispatcher
from .manifest import listed, published
from .policy import ROLES, SURFACES, Principal
from .providers import build_registry
from .schemas import SHAPES

__all__ = ["cmd_audit_verify", "cmd_dispatch", "cmd_verbs_list", "register"]


def _print(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


async def cmd_verbs_list(args: argparse.Namespace, settings: Settings) -> int:
    """Print the manifest (no database needed)."""
    verbs = listed(build_registry(), surface=args.surface, shape=args.shape)
    if args.json:
        _print(published(verbs))
    else:
        for v in verbs:
            print(
                f"{v.name:34} {v.shape:12} {v.policy.risk_class.name:17} {v.policy.subagent or '-':11} "
                f"{v.record['description'][:60]}"
            )
    return 0


async def cmd_dispatch(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch one verb locally; prints the envelope; exit 0 when ok, 1 otherwise."""
    try:
        verb_args = json.loads(args.args)
    except ValueError:
        raise BadRequest("--args must be a JSON object") from None
    if not isinstance(verb_args, dict):
        raise BadRequest("--args must be a JSON object")
    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        principal = Principal("staff", company.id, args.role, args.subject, "cli")
        d = Dispatcher(build_registry(), db.pool, settings, SystemClock())
        call = Call(args.verb, verb_args, args.confirm, args.phrase, args.nonce, args.idempotency_key)
        env = await d.dispatch(principal, call, company=company)
    if args.json:
        _print(env)
    elif env["ok"]:
        print(f"ok {env['verb']} audit_id={env.get('audit_id')}")
        _print(env.get("result"))
    else:
        e = env["error"]
        print(f"{e['reason']}: {e['message']}" + (f" ({e['hint']})" if e.get("hint") else ""))
        pending = env.get("pending") or {}
        if pending.get("approval_url"):  # a human-only verb: a person confirms it on the staff page
            print(f"phrase: {pending['required_phrase']}\napprove at: {pending['approval_url']}")
        elif pending.get("required_phrase"):
            print(f"phrase: {pending['required_phrase']}\nnonce:  {pending['nonce']}")
    return 0 if env["ok"] else 1


async def cmd_audit_verify(args: argparse.Namespace, settings: Settings) -> int:
    """Verify a company's audit chain; exit 1 and name the first broken row when it is broken."""
    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        async with tenant_tx(db.pool, company.id) as conn:
            rep = await verify_chain(conn, company.id)
    if getattr(args, "json", False):
        _print({"company": company.slug, **rep.to_json()})
    elif rep.ok:
        print(f"audit chain of {company.slug} intact: {rep.rows} rows")
    else:
        print(
            f"audit chain of {company.slug} BROKEN at audit_id={rep.broken_audit_id} "
            f"lane={rep.broken_lane} seq={rep.broken_seq}: {rep.problem}"
        )
    return 0 if rep.ok else 1


async def cmd_seed(args: argparse.Namespace, settings: Settings) -> int:
    """Seed the demo verb tables for a company whose catalogue is loaded."""
    from .demo import seed_verb_demo

    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        n = await seed_verb_demo(db.pool, company.id, SystemClock().now())
    print(f"seeded {n} orders for {company.slug}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``verbs``, ``agent`` and ``audit`` commands to the ``ucp-gateway`` parser."""
    common = [common_parser()]  # --data-dir, --json
    verbs = sub.add_parser("verbs", help="the verb registry").add_subparsers(dest="verbs_cmd", required=True)
    p = verbs.add_parser("list", parents=common, help="list verbs (the public manifest)")
    p.add_argument("--surface", choices=SURFACES)
    p.add_argument("--shape", choices=SHAPES)
    p.set_defaults(func=cmd_verbs_list)
    p = verbs.add_parser("seed-demo", parents=common, help="seed CRM contacts, orders and a macro for the demo verbs")
    p.add_argument("--company", required=True)
    p.set_defaults(func=cmd_seed)

    agent = sub.add_parser("agent", help="act as an agent").add_subparsers(dest="agent_cmd", required=True)
    p = agent.add_parser("dispatch", parents=common, help="dispatch one verb through the local runtime")
    p.add_argument("verb")
    p.add_argument("--company", required=True)
    p.add_argument("--as", dest="role", required=True, choices=ROLES)
    p.add_argument("--subject", default="cli")
    p.add_argument("--args", default="{}")
    p.add_argument("--confirm", action="store_true")
    p.add_argument("--phrase")
    p.add_argument("--nonce")
    p.add_argument("--idempotency-key")
    p.set_defaults(func=cmd_dispatch)

    audit = sub.add_parser("audit", help="the verb audit log").add_subparsers(dest="audit_cmd", required=True)
    p = audit.add_parser("verify", parents=common, help="verify a company's hash chain")
    p.add_argument("--company", required=True)
    p.set_defaults(func=cmd_audit_verify)

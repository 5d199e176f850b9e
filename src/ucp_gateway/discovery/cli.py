"""``ucp-gateway partners add|list|remove|policy --company SLUG``: the partner registry from the shell."""

from __future__ import annotations

import argparse
from typing import Any

from ..clibase import common_parser, emit
from ..config import Settings
from ..db import open_database
from ..tenancy import TIERS, get_company
from .partners import (
    PARTNER_ROLES,
    TRUST_MODES,
    add_partner,
    get_policy,
    list_partners,
    remove_partner,
    set_policy,
)

__all__ = ["cmd_blocks", "cmd_partners", "register"]


def _dev_hosts(settings: Settings) -> frozenset[str]:
    return frozenset(h.lower() for h in settings.dev_profile_hosts) if settings.dev_mode else frozenset()


def _out(args: argparse.Namespace, data: Any, text: str) -> None:
    emit(args, data, text)


async def cmd_partners(args: argparse.Namespace, settings: Settings) -> int:
    """Run one ``partners`` sub-command. Raises GatewayError on bad input (printed by cli.py)."""
    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        if args.partners_cmd == "add":
            p = await add_partner(
                db.pool,
                company.id,
                profile_url=args.profile,
                role=args.role,
                tier=args.tier,
                display_name=args.name,
                http_hosts=_dev_hosts(settings),
            )
            _out(args, p.to_json(), f"partner {p.profile_url} role={p.role} tier={p.tier}")
        elif args.partners_cmd == "list":
            partners = await list_partners(db.pool, company.id)
            policy = await get_policy(db.pool, company.id)
            lines = [f"trust_mode={policy.trust_mode} default_role={policy.default_role}"]
            lines += [f"{p.profile_url}\t{p.role}\t{p.tier}\t{p.display_name or ''}" for p in partners]
            data = {
                "company": company.slug,
                "trust_mode": policy.trust_mode,
                "default_role": policy.default_role,
                "partners": [p.to_json() for p in partners],
            }
            _out(args, data, "\n".join(lines))
        elif args.partners_cmd == "remove":
            await remove_partner(db.pool, company.id, args.profile)
            _out(args, {"removed": args.profile}, f"removed {args.profile}")
        else:
            pol = await set_policy(db.pool, company.id, trust_mode=args.mode, default_role=args.default_role)
            data = {"trust_mode": pol.trust_mode, "default_role": pol.default_role}
            _out(args, data, f"trust_mode={pol.trust_mode} default_role={pol.default_role}")
    return 0


async def cmd_blocks(args: argparse.Namespace, settings: Settings) -> int:
    """``blocks add|remove|list|purge``: a company's blocks on platform keys and profiles, and
    purges of a cached profile (httpsig.blocks; every process within block_cache_ttl seconds)."""
    from ..clock import SystemClock
    from ..httpsig.blocks import add_block, list_blocks, purge_profile, remove_block

    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        now = SystemClock().now()
        if args.blocks_cmd == "add":
            reason = args.reason or ""
            b = await add_block(db.pool, company.id, args.kind, args.value, reason=reason, actor="cli", now=now)
            _out(args, b, f"blocked {b['kind']} {b['value']}")
        elif args.blocks_cmd == "remove":
            await remove_block(db.pool, company.id, args.kind, args.value)
            _out(args, {"removed": {"kind": args.kind, "value": args.value}}, f"unblocked {args.kind} {args.value}")
        elif args.blocks_cmd == "list":
            blocks = await list_blocks(db.pool, company.id)
            text = "\n".join(f"{b['kind']}\t{b['value']}\t{b['created_at']}\t{b['reason']}" for b in blocks)
            _out(args, blocks, text or "no blocks")
        else:
            await purge_profile(db.pool, company.id, args.profile)
            _out(args, {"purged": args.profile}, f"purged {args.profile} (every process within seconds)")
    return 0


def _register_blocks(sub: Any, shared: list) -> None:
    from ..httpsig.blocks import KINDS

    parser = sub.add_parser("blocks", help="block a platform key or profile for a company; purge a cached profile")
    bsub = parser.add_subparsers(dest="blocks_cmd", required=True)
    for name, help_ in (("add", "block a key (kid, thumbprint) or a profile URL"), ("remove", "lift a block")):
        p = bsub.add_parser(name, parents=shared, help=help_)
        p.add_argument("--company", required=True, help="company slug or id")
        p.add_argument("--kind", required=True, choices=KINDS)
        p.add_argument("value", help="the kid, RFC 7638 thumbprint or profile URL (after '--' if it starts with '-')")
        if name == "add":
            p.add_argument("--reason")
        p.set_defaults(func=cmd_blocks)
    p = bsub.add_parser("list", parents=shared, help="list the company's blocks")
    p.add_argument("--company", required=True, help="company slug or id")
    p.set_defaults(func=cmd_blocks)
    p = bsub.add_parser("purge", parents=shared, help="drop the cached copy of a platform profile on every process")
    p.add_argument("--company", required=True, help="company slug or id")
    p.add_argument("profile", help="the platform profile URL")
    p.set_defaults(func=cmd_blocks)


def register(sub: Any) -> None:
    """Add the ``partners`` and ``blocks`` commands to the CLI's sub-parsers."""
    parser = sub.add_parser("partners", help="known platform profiles of a company (role and tier each)")
    psub = parser.add_subparsers(dest="partners_cmd", required=True)

    shared = [common_parser()]

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--company", required=True, help="company slug or id")
        p.set_defaults(func=cmd_partners)

    add = psub.add_parser("add", parents=shared, help="register or update a partner platform profile URL")
    common(add)
    add.add_argument("--profile", required=True, help="platform profile URL (https)")
    add.add_argument("--role", required=True, choices=PARTNER_ROLES)
    add.add_argument("--tier", default="starter", choices=TIERS)
    add.add_argument("--name", default=None, help="display name")
    common(psub.add_parser("list", parents=shared, help="list partners and the trust policy"))
    rm = psub.add_parser("remove", parents=shared, help="remove a partner")
    common(rm)
    rm.add_argument("--profile", required=True)
    pol = psub.add_parser("policy", parents=shared, help="set trust mode (open|allowlist) and the default role")
    common(pol)
    pol.add_argument("--mode", choices=TRUST_MODES, default=None)
    pol.add_argument("--default-role", choices=PARTNER_ROLES, default=None)
    _register_blocks(sub, shared)

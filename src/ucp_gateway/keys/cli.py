"""CLI: ``ucp-gateway keys list|rotate|activate|schedule|retire|compromise|advance|rewrap`` and
``ucp-gateway admin-tokens create|list|revoke``. No command ever prints a private key, and a
token's text only once, when it is created."""

from __future__ import annotations

import argparse
import getpass

from ..clibase import common_parser, emit
from ..clock import SystemClock
from ..config import Settings
from ..db import open_database
from ..tenancy import get_company, list_companies
from .admin_tokens import ROLES, create_admin_token, list_admin_tokens, parse_expiry, revoke_admin_token
from .repository import (
    Vault,
    apply_event,
    attach_vault,
    compromise_key,
    list_keys,
    parse_activate_at,
    rewrap_company,
    rotate,
    schedule_activation,
)
from .scheduler import run_once
from .web import load_ring

__all__ = ["register"]


def _actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _emit(args: argparse.Namespace, data, text: str) -> None:
    emit(args, data, text)


async def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    now = SystemClock().now()
    vault = Vault(load_ring(settings))
    async with open_database(settings) as db:
        attach_vault(db.pool, vault)
        if args.keys_cmd == "rewrap":
            total, after = 0, None
            while batch := await list_companies(db.pool, after_slug=after, limit=200):
                for c in batch:
                    total += await rewrap_company(db.pool, c.id)
                after = batch[-1].slug
            _emit(
                args,
                {"rewrapped": total, "kek_id": vault.ring.current},
                f"re-encrypted {total} key(s) under {vault.ring.current}",
            )
            return 0
        if args.keys_cmd == "advance":
            r = await run_once(
                db.pool, now=now, publish_min=settings.keys_publish_min, rotating_grace=settings.keys_rotating_grace
            )
            done = None if r is None else r.done  # None: another replica's round is running
            _emit(args, done, f"transitions: {done}" + (f" ({r.left} left for the next round)" if r and r.left else ""))
            return 0
        company = await get_company(db.pool, args.company)
        reason = getattr(args, "reason", None) or args.keys_cmd
        if args.keys_cmd == "list":
            keys = await list_keys(db.pool, company.id)
            _emit(
                args,
                [k.to_json() for k in keys],
                "\n".join(f"{k.kid}  {k.state.value:<11} {k.created_at:%Y-%m-%d}" for k in keys) or "no keys",
            )
        elif args.keys_cmd == "rotate":
            k = await rotate(db.pool, company.id, actor=_actor(), reason=reason, now=now)
            _emit(args, k.to_json(), f"new key {k.kid} is {k.state.value}")
        elif args.keys_cmd == "schedule":
            at = None if args.clear else parse_activate_at(args.at)
            k = await schedule_activation(db.pool, company.id, args.kid, at, actor=_actor(), now=now,
                                          publish_min=settings.keys_publish_min)  # fmt: skip
            when = (
                k.activate_at.isoformat() if k.activate_at else "the default time (keys_publish_min after publication)"
            )
            _emit(args, k.to_json(), f"{k.kid} activates at {when}")
        elif args.keys_cmd == "compromise":
            new = await compromise_key(db.pool, company.id, args.kid, actor=_actor(), reason=reason, now=now)
            _emit(
                args,
                {"kid": args.kid, "state": "compromised", "active_kid": new},
                f"{args.kid} compromised" + (f"; active key is now {new}" if new else ""),
            )
        else:
            publish_min = 0 if getattr(args, "force", False) else settings.keys_publish_min
            st = await apply_event(
                db.pool,
                company.id,
                args.kid,
                args.keys_cmd,
                actor=_actor(),
                reason=reason,
                now=now,
                publish_min=publish_min,
            )
            _emit(args, {"kid": args.kid, "state": st.value}, f"{args.kid} is {st.value}")
    return 0


async def cmd_token_create(args: argparse.Namespace, settings: Settings) -> int:
    now = SystemClock().now()
    expires = parse_expiry(args.expires, now)
    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        token, tid = await create_admin_token(
            db.pool, company.id, args.role, now=now, label=args.label or "", expires_at=expires
        )
    until = expires.isoformat().replace("+00:00", "Z") if expires else None
    _emit(
        args,
        {"token": token, "token_id": str(tid), "role": args.role, "company": company.slug, "expires_at": until},
        f"{token}\n(token id {tid}, role {args.role}, {'expires ' + until if until else 'no expiry'};"
        " shown once, store it now)",
    )
    return 0


async def cmd_token_list(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        tokens = await list_admin_tokens(db.pool, company.id, now=SystemClock().now())
    lines = [
        f"{t['token_id']}  {t['role']:<9} {t['state']:<7} created {t['created_at']}"
        + (f" expires {t['expires_at']}" if t["expires_at"] else "")
        + (f"  {t['label']}" if t["label"] else "")
        for t in tokens
    ]
    _emit(args, tokens, "\n".join(lines) or "no tokens")
    return 0


async def cmd_token_revoke(args: argparse.Namespace, settings: Settings) -> int:
    from uuid import UUID

    from ..errors import BadRequest, NotFound

    try:
        tid = UUID(args.token_id)
    except ValueError:
        raise BadRequest("token_id must be a token id as admin-tokens list shows it") from None
    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        known = {t["token_id"]: t for t in await list_admin_tokens(db.pool, company.id, now=SystemClock().now())}
        if str(tid) not in known:
            raise NotFound(f"no token {tid} for company {company.slug}")
        revoked = await revoke_admin_token(db.pool, company.id, tid, now=SystemClock().now())
    _emit(
        args,
        {"token_id": str(tid), "state": "revoked", "was_active": revoked},
        f"token {tid} revoked" if revoked else f"token {tid} was already revoked",
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``keys ...`` and ``admin-tokens create|list|revoke`` to the ``ucp-gateway`` parser."""
    keys = sub.add_parser("keys", help="per-company signing keys")
    ks = keys.add_subparsers(dest="keys_cmd", required=True)
    for name, help_ in (("list", "list keys"), ("rotate", "start a rotation (new pending key)")):
        p = ks.add_parser(name, help=help_, parents=[common_parser()])
        p.add_argument("--company", required=True, help="company slug or id")
        p.add_argument("--reason")
        p.set_defaults(func=cmd_keys)
    for name, help_ in (
        ("activate", "activate a pending key"),
        ("schedule", "schedule when the key scheduler activates a pending key (--at TIME, or --clear)"),
        ("retire", "retire a rotating/pending key"),
        ("compromise", "mark a key compromised (never signs again; gone from the profile at its next render, seconds)"),
    ):
        p = ks.add_parser(name, help=help_, parents=[common_parser()])
        p.add_argument("--company", required=True, help="company slug or id")
        # a base64url kid may start with '-': pass it after '--' (ucp-gateway keys retire --company s -- -Ab...)
        p.add_argument("kid", help="the key's kid (after '--' when it starts with '-')")
        p.add_argument("--reason")
        if name == "activate":
            p.add_argument("--force", action="store_true", help="skip the minimum publication time")
        if name == "schedule":
            when = p.add_mutually_exclusive_group(required=True)
            when.add_argument("--at", help="RFC 3339 time with an offset, e.g. 2026-06-01T12:00:00Z")
            when.add_argument("--clear", action="store_true", help="back to the default time")
        p.set_defaults(func=cmd_keys)
    for name, help_ in (
        ("rewrap", "re-encrypt all keys under the newest KEK"),
        ("advance", "run the key scheduler once"),
    ):
        p = ks.add_parser(name, help=help_, parents=[common_parser()])
        p.set_defaults(func=cmd_keys)
    tokens = sub.add_parser("admin-tokens", help="company admin API tokens")
    ts = tokens.add_subparsers(dest="tokens_cmd", required=True)
    p = ts.add_parser("create", help="create a token (printed once)", parents=[common_parser()])
    p.add_argument("--company", required=True)
    p.add_argument("--role", required=True, choices=ROLES)
    p.add_argument("--label")
    p.add_argument("--expires", help="a span (90m, 12h, 30d) or an RFC 3339 date-time; default: until revoked")
    p.set_defaults(func=cmd_token_create)
    p = ts.add_parser(
        "list", help="list tokens (id, role, state, times; never the token text)", parents=[common_parser()]
    )
    p.add_argument("--company", required=True)
    p.set_defaults(func=cmd_token_list)
    p = ts.add_parser(
        "revoke", help="revoke a token: refused on every process from the next request", parents=[common_parser()]
    )
    p.add_argument("--company", required=True)
    p.add_argument("token_id")
    p.set_defaults(func=cmd_token_revoke)

"""The ``ucp-gateway`` command line.

Every command prints one clear line to stderr and exits 1 on a user or configuration error (a
:class:`~ucp_gateway.errors.GatewayError`, or a constraint of the database refusing a write: never a
traceback); argparse usage errors exit 2; Ctrl-C exits 130. Commands
that a script might parse take ``--json``. Subsystems add their commands through a ``register(sub)``
function listed in :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import asyncpg
from pydantic import ValidationError
from pydantic_settings.exceptions import SettingsError

from . import __version__
from .clibase import common_parser, emit
from .config import Settings
from .db import open_database
from .db.database import owner_connect
from .db.migrate import apply_migrations
from .errors import ConfigError, GatewayError
from .logs import configure_logging

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

# Modules with a ``register(subparsers)`` function; each adds its own commands.
COMMAND_MODULES: list[str] = [
    "ucp_gateway.discovery.cli",  # partners add|list|remove|policy
    "ucp_gateway.access.cli",  # partners credentials add|list|revoke (after partners)
    "ucp_gateway.verbs.cli",  # verbs list|seed-demo, agent dispatch, audit verify
    "ucp_gateway.keys.cli",  # keys ..., admin-tokens create
    "ucp_gateway.commerce.cli",  # orders list|show (staff view of UCP orders)
    "ucp_gateway.commerce.slo",  # slo --since 1h (p50/p95 and availability against the platforms' targets)
    "ucp_gateway.transports.cli",  # mcp, shortcuts; --gateway on verbs list / agent dispatch
    "ucp_gateway.commerce.catalog_cli",  # catalog import|export (product feeds)
    "ucp_gateway.commerce.webhook_cli",  # webhooks status|dead|retry
    "ucp_gateway.toolkit.cli",  # sign, verify, keys generate-agent (after keys: it extends that command)
]


# --- foundation commands ----------------------------------------------------------------------


async def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from .serve import demo_seed_hook, run_server

    await run_server(settings, before_serve=demo_seed_hook(settings))
    return 0


async def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url:
        conn = await owner_connect(settings.database_url)
        try:
            applied = await apply_migrations(conn)
        finally:
            await conn.close()
    else:
        # connect_database applies migrations on the embedded server
        from .db.database import EMBEDDED_DB_NAME, with_database
        from .db.embedded import start_embedded, stop_embedded

        server, dsn = await start_embedded(settings.data_dir)
        try:
            from .db.database import _ensure_database

            await _ensure_database(dsn, EMBEDDED_DB_NAME)
            conn = await owner_connect(with_database(dsn, EMBEDDED_DB_NAME))
            try:
                applied = await apply_migrations(conn)
            finally:
                await conn.close()
        finally:
            await stop_embedded(server)
    emit(args, {"applied": applied}, "\n".join(f"applied {n}" for n in applied) or "database is current")
    return 0


async def cmd_companies_create(args: argparse.Namespace, settings: Settings) -> int:
    from .tenancy import create_company

    async with open_database(settings) as db:
        c = await create_company(
            db.pool,
            slug=args.slug,
            display_name=args.name or args.slug,
            hostnames=args.host or [],
            tier=args.tier,
            signature_policy=args.signature_policy,
        )
        from datetime import UTC, datetime

        from .keys import bootstrap_company_key  # its first signing key, published at once

        kid = await bootstrap_company_key(db, settings, c.id, now=datetime.now(UTC))
    if kid is None:
        print("ucp-gateway: warning: no KEK ring configured; the company's first key comes later", file=sys.stderr)
    emit(args, c.to_json() | {"active_kid": kid}, f"created company {c.slug} ({c.id}), key {kid or 'pending'}")
    return 0


async def _cmd_companies_import(args: argparse.Namespace, settings: Settings) -> int:
    from .keys.onboarding import cmd_import  # companies with their first keys, in batches

    return await cmd_import(args, settings)


async def cmd_companies_list(args: argparse.Namespace, settings: Settings) -> int:
    from .tenancy import list_companies

    out = []
    async with open_database(settings) as db:
        after = None
        while True:
            page = await list_companies(db.pool, after_slug=after, limit=500)
            out.extend(page)
            if len(page) < 500:
                break
            after = page[-1].slug
    emit(
        args,
        [c.to_json() for c in out],
        "\n".join(f"{c.slug}\t{c.tier}\t{','.join(c.hostnames)}" for c in out) or "no companies",
    )
    return 0


async def cmd_companies_show(args: argparse.Namespace, settings: Settings) -> int:
    from .tenancy import get_company, list_subagents

    async with open_database(settings) as db:
        c = await get_company(db.pool, args.slug)
        subs = await list_subagents(db.pool, c.id)
    data = c.to_json() | {"subagents": subs}
    lines = [f"{k}: {', '.join(v) if isinstance(v, list) else v}" for k, v in c.to_json().items()]
    lines.append("subagents: " + ", ".join(f"{n}{'' if e else ' (disabled)'}" for n, e in subs.items()))
    emit(args, data, "\n".join(lines))
    return 0


async def cmd_demo_seed(args: argparse.Namespace, settings: Settings) -> int:
    from .demo import seed_demo

    async with open_database(settings) as db:
        report = await seed_demo(db, settings, reset=args.reset)
    total = sum(report.inserted.values())
    emit(args, report.to_json(), f"demo company {report.company.slug}: {total} row(s) inserted")
    return 0


def _register_foundation(sub: argparse._SubParsersAction) -> None:
    common = common_parser()
    p = sub.add_parser("serve", parents=[common], help="run the gateway")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8080)")
    p.add_argument("--workers", type=int, help="serving processes sharing the listening socket (default 1)")
    p.add_argument("--metrics-port", type=int, help="port of the Prometheus listener, GET /metrics (default: none)")
    p.add_argument("--demo", action="store_true", help="seed and serve the flower-shop demo on 127.0.0.1/localhost")
    p.add_argument("--tls-cert", help="PEM server certificate (chain): terminate TLS here (HTTPS)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert (if not in that file)")
    p.add_argument("--client-ca", help="PEM CA of client certificates: request them (optional) for mTLS partners")
    p.add_argument("--client-crl", help="PEM CRL of --client-ca: revoked client certificates are refused")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("migrate", parents=[common], help="apply database migrations")
    p.set_defaults(func=cmd_migrate)

    comp = sub.add_parser("companies", help="manage companies").add_subparsers(dest="action", required=True)
    p = comp.add_parser("create", parents=[common], help="create a company")
    p.add_argument("slug")
    p.add_argument("--name", help="display name (default: the slug)")
    p.add_argument("--host", action="append", help="hostname bound to the company (repeatable)")
    p.add_argument("--tier", default="starter", choices=["starter", "growth", "pro", "enterprise"])
    p.add_argument("--signature-policy", default="required", choices=["required", "strict", "optional", "log", "off"])
    p.set_defaults(func=cmd_companies_create)
    p = comp.add_parser("import", parents=[common], help="create many companies from a CSV or JSON Lines file")
    p.add_argument("file", help="rows of slug, name, hosts, tier (.csv with a header, or .jsonl)")
    p.add_argument("--batch", type=int, default=500, help="companies per transaction (default 500)")
    p.set_defaults(func=_cmd_companies_import)
    p = comp.add_parser("list", parents=[common], help="list companies")
    p.set_defaults(func=cmd_companies_list)
    p = comp.add_parser("show", parents=[common], help="show one company")
    p.add_argument("slug")
    p.set_defaults(func=cmd_companies_show)

    demo = sub.add_parser("demo", help="demo data").add_subparsers(dest="action", required=True)
    p = demo.add_parser("seed", parents=[common], help="seed the flower-shop demo company (idempotent)")
    p.add_argument("--reset", action="store_true", help="delete the demo company first and reseed from scratch")
    p.set_defaults(func=cmd_demo_seed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ucp-gateway", description="UCP 2026-04-08 commerce gateway")
    parser.add_argument("--version", action="version", version=f"ucp-gateway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _register_foundation(sub)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _settings_error(exc: Exception) -> str:
    """pydantic-settings' message, which names the field (``error parsing value for field "x" from
    source "EnvSettingsSource"``), with a hint: complex settings are JSON in the environment."""
    msg = str(exc).split("\n", 1)[0]
    return f"{msg} (lists and objects are JSON, e.g. UCPGW_DEV_PROFILE_HOSTS='[\"127.0.0.1\"]')"


def _settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    fields = ("data_dir",)
    if args.command == "serve":
        fields += ("host", "port", "workers", "metrics_port", "tls_cert", "tls_key", "client_ca", "client_crl")
    for field in fields:
        value = getattr(args, field, None)
        if value is not None:
            overrides[field] = value
    if getattr(args, "demo", False):
        overrides["demo"] = True
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"invalid setting {where}: {err['msg']}") from None
    except SettingsError as exc:  # a list/dict setting whose environment value is no JSON
        raise ConfigError(f"invalid setting: {_settings_error(exc)}") from None
    if settings.demo:
        # The demo is a development deployment on loopback: plain http origins and dev secrets
        # generated under the data dir, unless the operator chose otherwise explicitly.
        if "public_scheme" not in settings.model_fields_set:
            settings.public_scheme = "http"
        if "public_port" not in settings.model_fields_set and settings.port:
            settings.public_port = settings.port  # the demo is reached on its listen port, not 80
        if "environment" not in settings.model_fields_set:
            settings.environment = "development"
        if not {"platform_hosts", "platform_origin"} & settings.model_fields_set:
            # the platform node on a loopback name of its own (RFC 6761: *.localhost is loopback;
            # curl resolves it itself), apart from the flower shop's 127.0.0.1 and localhost
            settings.platform_hosts = ("platform.localhost",)
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ucp-gateway`` console script. Returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = _settings_from(args)
        if args.command != "serve" and "log_level" not in settings.model_fields_set:
            settings.log_level = "warning"  # keep one-shot commands quiet on stderr
        configure_logging(settings)
        if args.command == "serve" and settings.workers > 1:  # a supervisor of N serving processes
            from .workers import supervise

            code = asyncio.run(supervise(settings))
        elif args.command == "serve":  # the serving loop: uvloop when installed (serve.loop_factory)
            from .serve import run

            code = run(settings, args.func(args, settings)) or 0
        else:
            code = asyncio.run(args.func(args, settings)) or 0
        sys.stdout.flush()  # surface a closed pipe here, not at interpreter exit
        return code
    except GatewayError as exc:
        print(f"ucp-gateway: error: {exc.message}", file=sys.stderr)
        return 1
    except asyncpg.IntegrityConstraintViolationError as exc:  # a check the command did not make itself
        first = str(exc).splitlines()[0] if str(exc) else exc.sqlstate
        print(f"ucp-gateway: error: the database refused the change: {first}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `ucp-gateway companies list --json | head`: the reader is gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit flush
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

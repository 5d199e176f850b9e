"""``ucp-gateway partners credentials add|list|revoke --company SLUG``: platform credentials.

``add --kind api-key|oauth-client --profile URL [--label TEXT]`` prints the secret once (the API key,
or the OAuth client id and secret); ``add --kind oauth-client --jwk FILE`` registers a client that
authenticates with ``private_key_jwt`` (FILE: its public JWK or JWK Set, ``-`` for stdin; no secret
is made); ``add --kind web-bot-auth --directory ORIGIN`` registers a Web Bot Auth key directory
for the partner, ``add --kind mtls-cert --cert PEM | --fingerprint sha256:HEX | --subject DN`` a TLS
client certificate (neither has a secret); ``list`` never shows a secret; ``revoke --id ID`` is
final. The
command joins the discovery package's ``partners`` command (registered after it in COMMAND_MODULES).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from ..clibase import common_parser, emit
from ..config import Settings
from ..db import open_database
from ..errors import BadRequest, ConfigError
from ..tenancy import get_company
from .credentials import KINDS, add_credential, list_credentials, revoke_credential
from .identities import certificate_identities

__all__ = ["cmd_credentials", "register"]


async def cmd_credentials(args: argparse.Namespace, settings: Settings) -> int:
    now = dt.datetime.now(dt.UTC)
    async with open_database(settings) as db:
        company = await get_company(db.pool, args.company)
        if args.credentials_cmd == "add":
            jwks = _read_jwk(args.jwk) if args.jwk else None
            cred, secret = await add_credential(db.pool, company.id, kind=args.kind, profile_url=args.profile, now=now,
                                                label=args.label, jwks=jwks, identity=_identity(args))  # fmt: skip
            if cred.identity is not None:
                emit(args, cred.to_json(), f"{cred.id} for {cred.profile_url}: {cred.kind} {cred.identity}")
                return 0
            what = "X-API-Key" if cred.kind == "api_key" else f"client_id={cred.id} client_secret"
            text = (f"{cred.id} for {cred.profile_url}\n{what}: {secret}\n(shown once: store it now)" if secret
                    else f"{cred.id} for {cred.profile_url}\nclient_id={cred.id} (private_key_jwt, "
                    f"{len((cred.jwks or {}).get('keys', []))} key(s))")  # fmt: skip
            emit(args, {**cred.to_json(), "secret": secret}, text)
        elif args.credentials_cmd == "list":
            creds = [c for c in await list_credentials(db.pool, company.id)
                     if args.kind is None or c.kind == args.kind.replace("-", "_")]  # fmt: skip
            lines = [f"{c.id}\t{c.kind}\t{c.profile_url}\t{'revoked' if c.revoked_at else 'live'}\t{c.label or ''}"
                     for c in creds]  # fmt: skip
            emit(args, {"credentials": [c.to_json() for c in creds]}, "\n".join(lines))
        else:
            cred = await revoke_credential(db.pool, company.id, args.id, now=now)
            emit(args, cred.to_json(), f"revoked {cred.id}")
    return 0


def _read_jwk(path: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``-``: stdin). Raises BadRequest when unreadable or not JSON."""
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        data = json.loads(raw)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"--jwk {path}: not a readable JSON file ({exc.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise BadRequest(f"--jwk {path}: expected a JWK or a JWK Set object")
    return data


def _identity(args: argparse.Namespace) -> str | None:
    """The ``identity`` of a web-bot-auth / mtls-cert credential from its options (None for the
    kinds with a secret). Raises ConfigError for a missing or unreadable one."""
    if args.kind == "web-bot-auth":
        if not args.directory:
            raise ConfigError("--kind web-bot-auth needs --directory ORIGIN (the Signature-Agent origin)")
        return args.directory
    if args.kind != "mtls-cert":
        return None
    if args.cert:
        from .mtls import load_certificate_file

        return certificate_identities(load_certificate_file(args.cert))[0]
    if args.fingerprint:
        fp = args.fingerprint
        return fp if fp.lower().startswith("sha256:") else "sha256:" + fp
    if args.subject:
        return "subject:" + args.subject
    raise ConfigError("--kind mtls-cert needs --cert PEM, --fingerprint sha256:HEX or --subject DN")


def _subparsers(parser: argparse.ArgumentParser) -> Any:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def register(sub: Any) -> None:
    """Add ``credentials`` under the ``partners`` command."""
    partners = sub.choices["partners"]
    cred = _subparsers(partners).add_parser(
        "credentials", help="API keys, OAuth clients, Web Bot Auth directories and mTLS certificates of partners"
    )
    csub = cred.add_subparsers(dest="credentials_cmd", required=True)
    shared = [common_parser()]

    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--company", required=True, help="company slug or id")
        p.set_defaults(func=cmd_credentials)
        return p

    add = common(csub.add_parser("add", parents=shared, help="new API key or OAuth client (secret shown once)"))
    add.add_argument("--kind", required=True, choices=KINDS)
    add.add_argument("--profile", required=True, help="the partner's platform profile URL (partners add first)")
    add.add_argument("--label", default=None)
    add.add_argument("--jwk", metavar="FILE", default=None,
                     help="oauth-client: its public JWK or JWK Set (ES256, ES384, EdDSA); it authenticates with "
                     "private_key_jwt and gets no secret ('-': stdin)")  # fmt: skip
    add.add_argument("--directory", help="web-bot-auth: the signer's key directory origin (its Signature-Agent)")
    add.add_argument("--cert", help="mtls-cert: a PEM client certificate, registered by its SHA-256 fingerprint")
    add.add_argument("--fingerprint", help="mtls-cert: the certificate's SHA-256 fingerprint (sha256:HEX)")
    add.add_argument("--subject", help="mtls-cert: every certificate of the client CA with this RFC 4514 subject")
    lst = common(csub.add_parser("list", parents=shared, help="list credentials (no secrets)"))
    lst.add_argument("--kind", choices=KINDS, default=None)
    rv = common(csub.add_parser("revoke", parents=shared, help="revoke a credential (final)"))
    rv.add_argument("--id", required=True)
    rv.add_argument("--kind", choices=KINDS, default=None)

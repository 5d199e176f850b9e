"""Platform credentials of a company's partners: API keys, OAuth 2.0 clients (migration 0071), Web
Bot Auth key directories and mTLS client certificates (migration 0110).

A credential acts for one partner (a registered platform profile URL, ``partners``). Secrets are
256 random bits, shown once, stored as SHA-256 hex: ``ucpak_...`` (API key, the ``X-API-Key``
value) and ``ucpcs_...`` (OAuth client secret). Ids: ``ak_`` / ``oc_`` + 16 hex digits (the OAuth
``client_id``); ``wb_`` (a Web Bot Auth directory origin) and ``mc_`` (an mTLS client
certificate, ``sha256:<hex>`` or ``subject:<RFC 4514 DN>``) hold no secret, only their
``identity``. Every statement runs in the company's tenant transaction (RLS): another company's
credential is never found. Revoking is final.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from ..db import tenant_tx
from ..errors import BadRequest, NotFound
from .client_jwt import check_jwks
from .identities import normalise_identity

__all__ = [
    "API_KEY_PREFIX",
    "CLIENT_SECRET_PREFIX",
    "IDENTITY_KINDS",
    "KINDS",
    "Credential",
    "add_credential",
    "find_api_key",
    "get_client",
    "list_credentials",
    "revoke_credential",
    "secret_hash",
]

KINDS = ("api-key", "oauth-client", "web-bot-auth", "mtls-cert")
IDENTITY_KINDS = ("web-bot-auth", "mtls-cert")  # no secret: a directory origin, a certificate
_PREFIX = {"api-key": "ak_", "oauth-client": "oc_", "web-bot-auth": "wb_", "mtls-cert": "mc_"}
API_KEY_PREFIX = "ucpak_"
CLIENT_SECRET_PREFIX = "ucpcs_"  # noqa: S105 - a prefix, not a secret


def secret_hash(secret: str) -> str:
    """SHA-256 hex of a secret or token (what is stored and looked up)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Credential:
    id: str
    kind: str  # api_key | oauth_client | web_bot_auth | mtls_cert
    profile_url: str
    label: str | None
    created_at: dt.datetime
    revoked_at: dt.datetime | None
    has_secret: bool
    jwks: dict[str, Any] | None
    identity: str | None = None  # web_bot_auth: directory origin; mtls_cert: sha256:/subject:

    def to_json(self) -> dict[str, Any]:
        """The listing (never a secret or hash)."""
        return {
            "id": self.id,
            "kind": self.kind.replace("_", "-"),
            "profile_url": self.profile_url,
            "label": self.label,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "auth_methods": (["client_secret_basic", "client_secret_post"] if self.has_secret else [])
            + (["private_key_jwt"] if self.jwks else [])
            if self.kind == "oauth_client"
            else _METHODS.get(self.kind, ["x-api-key"]),
            **({"identity": self.identity} if self.identity else {}),
        } | ({"jwks": self.jwks} if self.jwks else {})


_METHODS = {"web_bot_auth": ["web-bot-auth"], "mtls_cert": ["tls-client-certificate"]}


_COLS = "id, kind, profile_url, label, created_at, revoked_at, secret_hash IS NOT NULL AS has_secret, jwks, identity"


def _row(r: asyncpg.Record) -> Credential:
    return Credential(r["id"], r["kind"], r["profile_url"], r["label"], r["created_at"], r["revoked_at"],
                      r["has_secret"], r["jwks"], r["identity"])  # fmt: skip


async def add_credential(
    pool: asyncpg.Pool,
    company_id: UUID,
    *,
    kind: str,
    profile_url: str,
    now: dt.datetime,
    label: str | None = None,
    jwks: dict[str, Any] | None = None,
    identity: str | None = None,
) -> tuple[Credential, str | None]:
    """Create an API key or OAuth client for the partner ``profile_url``. Returns ``(credential,
    secret)``: the secret (API key, or client secret) is shown once; an OAuth client given ``jwks``
    (a public JWK or JWK Set, :func:`.client_jwt.check_jwks`) authenticates with ``private_key_jwt``
    (RFC 7523 §2.2) and gets no secret (None). Raises BadRequest (unknown kind, no such partner, bad
    label or keys, a missing, malformed or already registered ``identity``). A
    ``web-bot-auth`` or ``mtls-cert`` credential holds its ``identity`` (:func:`normalise_identity`)
    and no secret (``secret`` None)."""
    if kind not in KINDS:
        raise BadRequest(f"kind must be one of {', '.join(KINDS)}")
    if label is not None and not (1 <= len(label) <= 200):
        raise BadRequest("label must have 1-200 characters")
    if jwks is not None:
        if kind != "oauth-client":
            raise BadRequest("a JWK (private_key_jwt) is for an oauth-client only")
        try:
            jwks = check_jwks(jwks)
        except ValueError as exc:
            raise BadRequest(f"jwk: {exc}") from None
    if (identity is not None) != (kind in IDENTITY_KINDS):
        raise BadRequest(f"{kind} takes {'an identity' if kind in IDENTITY_KINDS else 'no identity'}")
    if identity is not None:
        identity = normalise_identity(kind, identity)
    cid = _PREFIX[kind] + secrets.token_hex(8)
    secret_prefix = API_KEY_PREFIX if kind == "api-key" else CLIENT_SECRET_PREFIX
    secret = None if jwks is not None or identity is not None else secret_prefix + secrets.token_urlsafe(32)
    try:
        async with tenant_tx(pool, company_id) as conn:
            row = await conn.fetchrow(
                "INSERT INTO platform_credentials (company_id, id, kind, profile_url, secret_hash, jwks, label,"
                f" created_at, identity) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {_COLS}",
                company_id, cid, kind.replace("-", "_"), profile_url, secret and secret_hash(secret), jwks, label, now,
                identity,
            )  # fmt: skip
    except asyncpg.UniqueViolationError:
        raise BadRequest(f"{identity} is already registered for a partner (revoke that credential first)") from None
    except asyncpg.ForeignKeyViolationError:
        raise BadRequest("no partner with this profile URL: add it first (ucp-gateway partners add)") from None
    return _row(row), secret


async def list_credentials(pool: asyncpg.Pool, company_id: UUID) -> list[Credential]:
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch(f"SELECT {_COLS} FROM platform_credentials ORDER BY created_at, id")
    return [_row(r) for r in rows]


async def revoke_credential(pool: asyncpg.Pool, company_id: UUID, cred_id: str, *, now: dt.datetime) -> Credential:
    """Revoke a credential (and with it every token of an OAuth client). Raises NotFound."""
    async with tenant_tx(pool, company_id) as conn:
        row = await conn.fetchrow(
            f"UPDATE platform_credentials SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 RETURNING {_COLS}",
            cred_id,
            now,
        )
        if row is not None:
            await conn.execute(
                "UPDATE oauth_access_tokens SET revoked_at = $2 WHERE client_id = $1 AND revoked_at IS NULL",
                cred_id, now,
            )  # fmt: skip
    if row is None:
        raise NotFound("no such credential")
    return _row(row)


async def find_api_key(pool: asyncpg.Pool, company_id: UUID, key: str) -> tuple[str, str] | None:
    """``(credential id, profile URL)`` of a live API key of this company, else None."""
    async with tenant_tx(pool, company_id) as conn:
        row = await conn.fetchrow(
            "SELECT id, profile_url FROM platform_credentials"
            " WHERE kind = 'api_key' AND secret_hash = $1 AND revoked_at IS NULL",
            secret_hash(key),
        )
    return (row["id"], row["profile_url"]) if row else None


async def get_client(conn: asyncpg.Connection, client_id: str) -> asyncpg.Record | None:
    """A live OAuth client row (``id, profile_url, secret_hash, jwks``) in the caller's tenant transaction."""
    return await conn.fetchrow(
        "SELECT id, profile_url, secret_hash, jwks FROM platform_credentials"
        " WHERE id = $1 AND kind = 'oauth_client' AND revoked_at IS NULL",
        client_id,
    )

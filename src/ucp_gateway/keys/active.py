"""The company's active signing key, read for signing: one statement per call, the decrypted key
cached by the vault per exact stored record. Private keys leave this module only as in-memory
``cryptography`` objects inside :class:`SigningKey`. The lifecycle writes are :mod:`.repository`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import Conflict
from .repository import ensure_active_key
from .rfc7638 import private_key_from_jwk, public_jwk
from .vault import Vault, get_vault

__all__ = ["NoActiveKey", "SigningKey", "active_signing_key", "active_signing_key_record"]


class NoActiveKey(Conflict):
    code = "no_active_key"


@dataclass(frozen=True, slots=True)
class SigningKey:
    """The company's active key, ready to sign. ``alg`` is the JWA name (ES256)."""

    company_id: UUID
    kid: str
    private_key: ec.EllipticCurvePrivateKey
    public_jwk: dict[str, Any]
    alg: str = "ES256"

    def __repr__(self) -> str:  # never print key material
        return f"SigningKey(company_id={self.company_id}, kid={self.kid!r})"


# The active key's id and stored record in ONE statement (one round trip, no BEGIN/COMMIT): the
# tenant context is set by set_config(..., true) in the outer row, which lives as long as this
# statement's implicit transaction; the LATERAL subquery (kept apart by OFFSET 0) is scanned only
# after that row exists, so RLS (company_id = app_company_id()) sees the context. The explicit
# company_id predicate makes another tenant's row impossible whatever the setting held; a context
# not yet visible could only hide the row (fail closed), never show another (tests/keys).
_ACTIVE_ONE_STATEMENT = (
    "SELECT k.kid, k.private_enc::text AS record"
    " FROM (SELECT set_config('app.company_id', $1, true) AS cid) AS ctx"
    " CROSS JOIN LATERAL (SELECT kid, private_enc FROM company_keys"
    " WHERE state = 'active' AND company_id = ctx.cid::uuid OFFSET 0) AS k"
)


async def active_signing_key(
    pool: asyncpg.Pool,
    company_id: UUID,
    *,
    vault: Vault | None = None,
    create_if_missing: bool = True,
    now: dt.datetime | None = None,
) -> SigningKey:
    """The company's active key with its decrypted private key.

    Which key is active is read from the database on every call (one statement), so a lifecycle
    change (``compromised``, ``retired``, a rotation) takes effect on the next call in every
    replica; only the decrypted key is cached, by the vault, per exact stored record
    (:class:`.vault.Vault`). A company that never had a key gets its first one here
    (``create_if_missing``; nobody can have cached an older key, so it may sign at once).
    ``vault`` defaults to the one attached to ``pool``. Raises NoActiveKey (409),
    KeyDecryptError (500, fail closed) or ConfigError (no KEK).
    """
    key, _ = await active_signing_key_record(
        pool, company_id, vault=vault, create_if_missing=create_if_missing, now=now
    )
    return key


async def active_signing_key_record(
    pool: asyncpg.Pool,
    company_id: UUID,
    *,
    vault: Vault | None = None,
    create_if_missing: bool = True,
    now: dt.datetime | None = None,
) -> tuple[SigningKey, str]:
    """:func:`active_signing_key` and the stored record it was decrypted from (``private_enc::text``,
    the exact text the vault's cache entry is keyed on). Raises as that does."""
    v = vault or get_vault(pool)
    cid = UUID(str(company_id))
    r = await pool.fetchrow(_ACTIVE_ONE_STATEMENT, str(cid))
    if r is None and create_if_missing:
        await ensure_active_key(pool, cid, now=now or dt.datetime.now(dt.UTC), vault=v)
        return await active_signing_key_record(pool, cid, vault=v, create_if_missing=False)
    if r is None:
        raise NoActiveKey("company has no active signing key")
    kid = r["kid"]

    def build(jwk: dict[str, Any]) -> SigningKey:
        return SigningKey(cid, kid, private_key_from_jwk(jwk), public_jwk(jwk, kid))

    return v.cached(cid, kid, r["record"], build), r["record"]

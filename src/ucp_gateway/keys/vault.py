"""The KEK ring and decrypted-key cache bound to a database pool (no global singleton: one per pool)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import ConfigError
from .envelope import KekRing, decrypt_private_jwk
from .rfc7638 import private_key_from_jwk

__all__ = ["Vault", "attach_vault", "get_vault", "vault_of"]


class Vault:
    """The KEK ring plus a cache of decrypted private keys by ``(company_id, kid)``.

    Which key is active is read from the database on every call (so a compromise takes effect
    at once); only the decrypted material is cached.
    """

    def __init__(self, ring: KekRing):
        self.ring = ring
        self._cache: dict[tuple[UUID, str], ec.EllipticCurvePrivateKey] = {}

    def private_key(self, company_id: UUID, kid: str, blob: dict[str, Any]) -> ec.EllipticCurvePrivateKey:
        key = self._cache.get((company_id, kid))
        if key is None:
            key = private_key_from_jwk(decrypt_private_jwk(self.ring, company_id, kid, blob))
            self._cache[(company_id, kid)] = key
        return key

    def forget(self, company_id: UUID, kid: str) -> None:
        self._cache.pop((company_id, kid), None)


# asyncpg pools take no weak references: key by id() and keep the pool to rule out id reuse;
# closed pools are dropped on the next attach.
_VAULTS: dict[int, tuple[Any, Vault]] = {}


def attach_vault(pool: asyncpg.Pool, vault: Vault) -> None:
    """Bind a vault to a pool so ``active_signing_key(pool, company_id)`` can decrypt.

    Done by ``keys.web.setup`` at startup and by the CLI; lives and dies with the pool.
    """
    for k, (p, _v) in list(_VAULTS.items()):
        if p.is_closing():
            del _VAULTS[k]
    _VAULTS[id(pool)] = (pool, vault)


def vault_of(pool: Any) -> Vault | None:
    entry = _VAULTS.get(id(pool))
    return entry[1] if entry is not None and entry[0] is pool else None


def get_vault(pool: asyncpg.Pool) -> Vault:
    v = vault_of(pool)
    if v is None:
        raise ConfigError("no KEK ring configured (UCPGW_KEK_RING / UCPGW_KEK_FILE): cannot sign")
    return v

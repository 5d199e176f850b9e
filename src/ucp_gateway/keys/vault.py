"""The KEK ring and decrypted-key cache bound to a database pool (no global singleton: one per pool)."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID

import asyncpg

from ..errors import ConfigError
from .envelope import KekRing, decrypt_private_jwk

__all__ = ["Vault", "attach_vault", "get_vault", "vault_of"]

T = TypeVar("T")


class Vault:
    """The KEK ring plus a bounded cache of decrypted private keys.

    Which key is active is read from the database on every call (so a compromise takes effect
    at once); only the decrypted key object is cached, keyed by ``(company_id, kid, SHA-256 of
    the stored encrypted record)``: the record names its KEK and holds nonce and ciphertext, so a
    rewrapped or replaced row never meets an entry made from its old bytes, and an entry is only
    ever what decrypting exactly those bytes (AAD-bound to company and kid) gave. Least recently
    used entries go beyond ``max_entries``; :meth:`clear` on app cleanup. Never logs key material.
    """

    def __init__(self, ring: KekRing, *, max_entries: int = 1024):
        self.ring = ring
        self.max_entries = max_entries
        self._cache: OrderedDict[tuple[UUID, str, bytes], Any] = OrderedDict()

    def __repr__(self) -> str:  # never print key material
        return f"Vault(ring={self.ring!r}, cached={len(self._cache)})"

    def cached(self, company_id: UUID, kid: str, record: str, build: Callable[[dict[str, Any]], T]) -> T:
        """``build(jwk)`` of the private JWK decrypted from ``record`` (the stored JSON text),
        from the cache when these exact bytes were decrypted before. Raises KeyDecryptError."""
        ck = (company_id, kid, hashlib.sha256(record.encode()).digest())
        hit = self._cache.get(ck)
        if hit is not None:
            self._cache.move_to_end(ck)
            return hit
        value = build(decrypt_private_jwk(self.ring, company_id, kid, json.loads(record)))
        self.forget(company_id, kid)  # an entry made from this key's earlier record (rewrapped)
        self._cache[ck] = value
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return value

    def forget(self, company_id: UUID, kid: str) -> None:
        """Drop every cached entry of ``kid`` (compromised or retired: no reason to keep it)."""
        for ck in [ck for ck in self._cache if ck[0] == company_id and ck[1] == kid]:
            del self._cache[ck]

    def clear(self) -> None:
        """Drop every cached key (app cleanup)."""
        self._cache.clear()

    @property
    def size(self) -> int:
        """How many decrypted keys are cached (a Vault has no ``__len__``: it must stay truthy)."""
        return len(self._cache)


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

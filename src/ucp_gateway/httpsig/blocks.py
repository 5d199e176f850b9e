"""Operator blocks on buyer agents, per company: a platform key (by ``kid`` or RFC 7638 thumbprint)
or a platform profile URL, and purges of a cached platform profile (migration 0084).

Blocks are rows of ``platform_blocks``; every process reads a company's blocks at most every
``block_cache_ttl`` seconds (:class:`BlockCache`, 2 s by default), so a block added on one replica
holds on all of them within that time plus one request. The same read picks up the company's
``profile_purges`` newer than the last one seen and drops those URLs from the process's profile
caches (the resolver's ``purge``), so the next request fetches the profile again: a key its owner
dropped from the profile stops verifying at once instead of when the cached copy expires.

Enforced by the signature middleware (a verified signature whose key is blocked: 401
``key_not_found``) and the trust middleware (a ``UCP-Agent`` profile that is blocked: 403
``profile_not_trusted``), signed or not.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from ..db import tenant_tx
from ..errors import BadRequest, NotFound

__all__ = [
    "KINDS",
    "BlockCache",
    "Blocks",
    "add_block",
    "jwk_thumbprint",
    "list_blocks",
    "purge_profile",
    "remove_block",
]

#: What a block names: a key's ``kid``, a key's RFC 7638 thumbprint, or a profile URL.
KINDS = ("kid", "thumbprint", "profile")
_MEMBERS = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x"), "RSA": ("e", "kty", "n")}


def jwk_thumbprint(jwk: dict[str, Any]) -> str | None:
    """RFC 7638 §3 SHA-256 thumbprint (base64url, no padding) of a public JWK; None when its
    ``kty`` is unknown or a required member is not a string."""
    names = _MEMBERS.get(jwk.get("kty"))  # type: ignore[arg-type]
    if names is None or not all(isinstance(jwk.get(n), str) for n in names):
        return None
    canonical = json.dumps({n: jwk[n] for n in names}, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()


def _check(kind: str, value: str) -> None:
    if kind not in KINDS:
        raise BadRequest(f"kind must be one of {', '.join(KINDS)}")
    if not isinstance(value, str) or not 1 <= len(value) <= 2048 or not value.isprintable():
        raise BadRequest("value must be 1-2048 printable characters")


async def add_block(
    pool: asyncpg.Pool, company_id: UUID, kind: str, value: str, *, reason: str, actor: str, now: dt.datetime
) -> dict[str, Any]:
    """Block ``value`` (a kid, thumbprint or profile URL) for the company; idempotent (a second
    block keeps the first one's time and reason). Returns the block. Raises BadRequest."""
    _check(kind, value)
    if not isinstance(reason, str) or len(reason) > 500:
        raise BadRequest("reason must be a string of at most 500 characters")
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute(
            "INSERT INTO platform_blocks (company_id, kind, value, reason, created_by, created_at) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            company_id, kind, value, reason, actor[:200], now,
        )  # fmt: skip
        row = await conn.fetchrow("SELECT * FROM platform_blocks WHERE kind = $1 AND value = $2", kind, value)
    return _json(row)


async def remove_block(pool: asyncpg.Pool, company_id: UUID, kind: str, value: str) -> None:
    """Lift a block. Raises BadRequest, NotFound (no such block)."""
    _check(kind, value)
    async with tenant_tx(pool, company_id) as conn:
        status = await conn.execute("DELETE FROM platform_blocks WHERE kind = $1 AND value = $2", kind, value)
    if status.endswith(" 0"):
        raise NotFound(f"no {kind} block for {value}")


async def list_blocks(pool: asyncpg.Pool, company_id: UUID) -> list[dict[str, Any]]:
    """The company's blocks: ``{"kind", "value", "reason", "created_by", "created_at"}``, by kind and value."""
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch("SELECT * FROM platform_blocks ORDER BY kind, value")
    return [_json(r) for r in rows]


async def purge_profile(pool: asyncpg.Pool, company_id: UUID, profile_url: str) -> None:
    """Ask every process to drop its cached copy of ``profile_url`` (within ``block_cache_ttl``
    seconds, on its next request for this company). Stamped with the database's clock, which the
    processes compare with their own start (both real UTC clocks). Raises BadRequest."""
    _check("profile", profile_url)
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute(
            "INSERT INTO profile_purges (company_id, profile_url, purged_at) VALUES ($1, $2, clock_timestamp()) "
            "ON CONFLICT (company_id, profile_url) DO UPDATE SET purged_at = excluded.purged_at",
            company_id, profile_url,
        )  # fmt: skip


def _json(row: Any) -> dict[str, Any]:
    at = row["created_at"].astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return {"kind": row["kind"], "value": row["value"], "reason": row["reason"], "created_by": row["created_by"],
            "created_at": at}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Blocks:
    """One company's blocks as sets (what the middlewares test on every request)."""

    kids: frozenset[str] = frozenset()
    thumbprints: frozenset[str] = frozenset()
    profiles: frozenset[str] = frozenset()

    def key_blocked(self, kid: str, jwk: dict[str, Any] | None) -> bool:
        if kid in self.kids:
            return True
        return bool(self.thumbprints) and jwk is not None and jwk_thumbprint(jwk) in self.thumbprints


_NONE = Blocks()
_READ = (
    "SELECT kind, value, NULL::timestamptz AS purged_at FROM platform_blocks "
    "UNION ALL SELECT 'purge', profile_url, purged_at FROM profile_purges WHERE purged_at > $1"
)


class BlockCache:
    """Per process: company id -> (Blocks, read at, purges seen up to), re-read after ``ttl``
    seconds. ``purgers``: callables given each purged profile URL (the profile caches' ``purge``)."""

    def __init__(self, ttl: float, purgers: Iterable[Callable[[str], object]] = (), capacity: int = 4096):
        self.ttl, self.capacity = ttl, capacity
        self.purgers = list(purgers)
        self._started = dt.datetime.now(dt.UTC)  # purges before the process started concern no cache of it
        self._entries: dict[UUID, tuple[Blocks, float, dt.datetime]] = {}

    async def get(self, pool: asyncpg.Pool, company_id: UUID) -> Blocks:
        hit = self._entries.get(company_id)
        now = time.monotonic()
        if hit is not None and now - hit[1] < self.ttl:
            return hit[0]
        seen = hit[2] if hit is not None else self._started
        async with tenant_tx(pool, company_id) as conn:
            rows = await conn.fetch(_READ, seen)
        sets: dict[str, set[str]] = {k: set() for k in KINDS}
        for r in rows:
            if r["kind"] == "purge":
                seen = max(seen, r["purged_at"])
                for purge in self.purgers:
                    purge(r["value"])
            else:
                sets[r["kind"]].add(r["value"])
        blocks = Blocks(frozenset(sets["kid"]), frozenset(sets["thumbprint"]), frozenset(sets["profile"]))
        if not any(sets.values()):
            blocks = _NONE
        if len(self._entries) >= self.capacity:
            self._entries.clear()
        self._entries[company_id] = (blocks, now, seen)
        return blocks

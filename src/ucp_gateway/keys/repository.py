"""Company keys in PostgreSQL (table ``company_keys``, migration 0010), always in a tenant context.

Every transition runs in one transaction with the row locked, goes through
:func:`.lifecycle.step`, and writes a ``key_events`` row (who and why). Private keys leave this
module encrypted; the active key's read for signing is :mod:`.active`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from ..db import tenant_tx
from ..errors import BadRequest, Conflict, NotFound
from .envelope import KekRing, encrypt_private_jwk, rewrap
from .lifecycle import PUBLISHED, IllegalTransition, KeyEvent, KeyState, KeyTiming, due_events, step
from .rfc7638 import generate_p256, public_jwk
from .vault import Vault, attach_vault, get_vault, vault_of

__all__ = [
    "SCHEDULE_MAX",
    "CompanyKey",
    "KeyNotFoundError",
    "NewKey",
    "Vault",
    "advance_company",
    "apply_event",
    "attach_vault",
    "compromise_key",
    "ensure_active_key",
    "get_vault",
    "has_active_key",
    "list_key_events",
    "list_keys",
    "new_key",
    "parse_activate_at",
    "published_jwks",
    "rewrap_company",
    "rotate",
    "schedule_activation",
]


class KeyNotFoundError(NotFound):
    code = "key_not_found"


@dataclass(frozen=True, slots=True)
class CompanyKey:
    """One key row without its private material. Times: aware UTC datetimes."""

    company_id: UUID
    kid: str
    state: KeyState
    public_jwk: dict[str, Any]
    kek_id: str
    created_at: dt.datetime
    state_changed_at: dt.datetime
    activate_at: dt.datetime | None = None  # a pending key's scheduled activation (migration 0116)

    def to_json(self) -> dict[str, Any]:
        return {
            "kid": self.kid,
            "state": self.state.value,
            "public_jwk": self.public_jwk,
            "kek_id": self.kek_id,
            "created_at": self.created_at.isoformat(),
            "state_changed_at": self.state_changed_at.isoformat(),
            "activate_at": self.activate_at.isoformat() if self.activate_at else None,
        }


_COLS = "company_id, kid, state, public_jwk, kek_id, created_at, state_changed_at, activate_at"


def _row(r: asyncpg.Record) -> CompanyKey:
    return CompanyKey(
        r["company_id"],
        r["kid"],
        KeyState(r["state"]),
        dict(r["public_jwk"]),
        r["kek_id"],
        r["created_at"],
        r["state_changed_at"],
        r["activate_at"],
    )


async def list_keys(pool: asyncpg.Pool, company_id: UUID) -> list[CompanyKey]:
    """All keys of the company, newest first."""
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch(f"SELECT {_COLS} FROM company_keys ORDER BY created_at DESC, kid")
    return [_row(r) for r in rows]


async def list_key_events(pool: asyncpg.Pool, company_id: UUID) -> list[dict[str, Any]]:
    """The audit trail of key transitions, oldest first."""
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch(
            "SELECT kid, from_state, to_state, event, actor, reason, at FROM key_events ORDER BY seq"
        )
    return [dict(r) for r in rows]


async def published_jwks(pool: asyncpg.Pool, company_id: UUID) -> list[dict[str, Any]]:
    """Public JWKs for the discovery profile's ``signing_keys``: pending + active + rotating.

    Each has 32-byte ``x``/``y``, ``use: sig``, ``alg: ES256`` and ``kid``. Active first.
    """
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch(
            "SELECT public_jwk FROM company_keys WHERE state = ANY($1::text[]) "
            "ORDER BY (state = 'active') DESC, created_at DESC",
            [s.value for s in PUBLISHED],
        )
    return [dict(r["public_jwk"]) for r in rows]


async def _event(conn, company_id, kid, from_state, to_state, event, actor, reason, now) -> None:
    await conn.execute(
        "INSERT INTO key_events (company_id, kid, from_state, to_state, event, actor, reason, at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        company_id,
        kid,
        from_state,
        to_state,
        event,
        actor,
        reason,
        now,
    )


@dataclass(frozen=True, slots=True)
class NewKey:
    """A freshly generated key as stored (:func:`new_key`): ``private_enc`` is the encrypted record."""

    kid: str
    public_jwk: dict[str, Any]
    private_enc: dict[str, Any]
    kek_id: str


def new_key(ring: KekRing, company_id: UUID) -> NewKey:
    """A new EC P-256 key for ``company_id``, its private half encrypted under ``ring``'s current KEK."""
    jwk, kid = generate_p256()
    return NewKey(kid, public_jwk(jwk, kid), encrypt_private_jwk(ring, company_id, kid, jwk), ring.current)


async def _insert_new(conn, ring: KekRing, company_id: UUID, state: KeyState, actor: str, reason: str, now) -> str:
    k = new_key(ring, company_id)
    kid = k.kid
    await conn.execute(
        "INSERT INTO company_keys (company_id, kid, state, public_jwk, private_enc, kek_id, created_at, "
        "state_changed_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
        company_id,
        kid,
        state.value,
        k.public_jwk,
        k.private_enc,
        k.kek_id,
        now,
    )
    await _event(conn, company_id, kid, None, state.value, "create", actor, reason, now)
    return kid


async def _transition(conn, company_id, kid, event: KeyEvent, actor, reason, now) -> KeyState:
    cur = await conn.fetchval("SELECT state FROM company_keys WHERE kid = $1 FOR UPDATE", kid)
    if cur is None:
        raise KeyNotFoundError(f"no key {kid}")
    nxt = step(cur, event)
    if nxt is KeyState.ACTIVE:  # exactly one active: the old one moves to rotating first
        old = await conn.fetchval("SELECT kid FROM company_keys WHERE state = 'active' FOR UPDATE")
        if old is not None:
            await _transition(conn, company_id, old, KeyEvent.ROTATE_OUT, actor, f"superseded by {kid}", now)
    await conn.execute("UPDATE company_keys SET state = $2, state_changed_at = $3 WHERE kid = $1", kid, nxt.value, now)
    await _event(conn, company_id, kid, cur, nxt.value, event.value, actor, reason, now)
    return nxt


async def apply_event(
    pool: asyncpg.Pool,
    company_id: UUID,
    kid: str,
    event: KeyEvent | str,
    *,
    actor: str,
    reason: str,
    now: dt.datetime,
    publish_min: int | None = None,
) -> KeyState:
    """Run one lifecycle event on one key. Raises IllegalTransition (409) or KeyNotFoundError.

    ``activate`` with ``publish_min`` refuses a pending key published for less than that many
    seconds while another key is active (verifiers may not have fetched it yet).
    """
    ev = KeyEvent(event)
    async with tenant_tx(pool, company_id) as conn:
        if ev is KeyEvent.ACTIVATE and publish_min:
            r = await conn.fetchrow("SELECT state, state_changed_at FROM company_keys WHERE kid = $1", kid)
            has_active = await conn.fetchval("SELECT 1 FROM company_keys WHERE state = 'active'")
            if r and r["state"] == "pending" and has_active:
                age = (now - r["state_changed_at"]).total_seconds()
                if age < publish_min:
                    raise Conflict(
                        f"key {kid} must be published for {publish_min} s before activation ({int(age)} s so far)",
                        code="key_not_yet_published",
                    )
        nxt = await _transition(conn, company_id, kid, ev, actor, reason, now)
    if nxt is KeyState.COMPROMISED or nxt is KeyState.RETIRED:
        _forget(pool, company_id, kid)
    return nxt


def _forget(pool, company_id, kid) -> None:
    v = vault_of(pool)
    if v is not None:
        v.forget(UUID(str(company_id)), kid)


async def rotate(
    pool: asyncpg.Pool,
    company_id: UUID,
    *,
    actor: str,
    reason: str,
    now: dt.datetime,
    vault: Vault | None = None,
) -> CompanyKey:
    """Start a rotation: a new key in ``pending`` (published, not signing yet).

    With no active key the new key becomes active at once (nobody can have cached an older one).
    Raises Conflict if a pending key already exists.
    """
    ring = (vault or get_vault(pool)).ring
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 7638))", str(company_id))
        if await conn.fetchval("SELECT 1 FROM company_keys WHERE state = 'pending'"):
            raise Conflict("a pending key already exists; activate or retire it first", code="rotation_in_progress")
        has_active = await conn.fetchval("SELECT 1 FROM company_keys WHERE state = 'active'")
        state = KeyState.PENDING if has_active else KeyState.ACTIVE
        kid = await _insert_new(conn, ring, company_id, state, actor, reason, now)
        r = await conn.fetchrow(f"SELECT {_COLS} FROM company_keys WHERE kid = $1", kid)
    return _row(r)


async def has_active_key(pool: asyncpg.Pool, company_id: UUID) -> bool:
    async with tenant_tx(pool, company_id) as conn:
        return bool(await conn.fetchval("SELECT 1 FROM company_keys WHERE state = 'active'"))


async def ensure_active_key(
    pool: asyncpg.Pool,
    company_id: UUID,
    *,
    now: dt.datetime,
    actor: str = "system",
    vault: Vault | None = None,
) -> str:
    """The active kid, creating the company's first key if it has none. Idempotent."""
    ring = (vault or get_vault(pool)).ring
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 7638))", str(company_id))
        kid = await conn.fetchval("SELECT kid FROM company_keys WHERE state = 'active'")
        if kid is None:
            kid = await _insert_new(conn, ring, company_id, KeyState.ACTIVE, actor, "bootstrap", now)
    return kid


async def compromise_key(
    pool: asyncpg.Pool,
    company_id: UUID,
    kid: str,
    *,
    actor: str,
    reason: str,
    now: dt.datetime,
    vault: Vault | None = None,
) -> str | None:
    """Mark ``kid`` compromised (unpublished and unusable at once). If it was the active key, a
    pending key is promoted or a new key is created active, so signing continues. Returns the new
    active kid (or None if ``kid`` was not active)."""
    ring = (vault or get_vault(pool)).ring
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 7638))", str(company_id))
        was = await conn.fetchval("SELECT state FROM company_keys WHERE kid = $1 FOR UPDATE", kid)
        await _transition(conn, company_id, kid, KeyEvent.COMPROMISE, actor, reason, now)
        new_kid = None
        if was == "active":
            new_kid = await conn.fetchval(
                "SELECT kid FROM company_keys WHERE state = 'pending' ORDER BY state_changed_at LIMIT 1"
            )
            if new_kid:
                await _transition(
                    conn, company_id, new_kid, KeyEvent.ACTIVATE, actor, f"replaces compromised {kid}", now
                )
            else:
                new_kid = await _insert_new(
                    conn, ring, company_id, KeyState.ACTIVE, actor, f"replaces compromised {kid}", now
                )
    _forget(pool, company_id, kid)
    return new_kid


async def advance_company(
    pool: asyncpg.Pool,
    company_id: UUID,
    *,
    now: dt.datetime,
    publish_min: int,
    rotating_grace: int,
    then: str | None = None,
) -> list[tuple[str, KeyEvent]]:
    """Apply the time-driven transitions that are due (see :func:`.lifecycle.due_events`).
    ``then``: a first statement of the transaction (:func:`..db.tenant_tx`), e.g. a lock timeout."""
    async with tenant_tx(pool, company_id, then=then) as conn:
        rows = await conn.fetch("SELECT kid, state, state_changed_at, activate_at FROM company_keys FOR UPDATE")
        timings = [KeyTiming(r["kid"], KeyState(r["state"]), r["state_changed_at"], r["activate_at"]) for r in rows]
        done = due_events(timings, now, publish_min=publish_min, rotating_grace=rotating_grace)
        for kid, ev in done:
            why = "published long enough" if ev is KeyEvent.ACTIVATE else "grace period over"
            if ev is KeyEvent.ACTIVATE and any(t.kid == kid and t.activate_at for t in timings):
                why = "scheduled activation"
            await _transition(conn, company_id, kid, ev, "scheduler", why, now)
    for kid, ev in done:
        if ev is KeyEvent.RETIRE:
            _forget(pool, company_id, kid)
    return done


#: the furthest ahead an activation may be scheduled
SCHEDULE_MAX = dt.timedelta(days=365)


def parse_activate_at(value: Any) -> dt.datetime | None:
    """An RFC 3339 time with an offset (``2026-06-01T12:00:00Z``) as an aware UTC datetime; None for
    None. Raises BadRequest for anything else (the admin API, the CLI and the keys page share it)."""
    if value is None:
        return None
    try:
        at = dt.datetime.fromisoformat(value) if isinstance(value, str) and len(value) <= 40 else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise BadRequest("activate_at must be an RFC 3339 time with an offset, e.g. 2026-06-01T12:00:00Z")
    return at.astimezone(dt.UTC)


async def schedule_activation(
    pool: asyncpg.Pool,
    company_id: UUID,
    kid: str,
    at: dt.datetime | None,
    *,
    actor: str,
    now: dt.datetime,
    publish_min: int,
) -> CompanyKey:
    """Schedule when the key scheduler activates the pending key ``kid`` (``at``, aware; None: back
    to the default rule, ``publish_min`` after it was published). Recorded as a key event
    (``schedule_activation``). Raises KeyNotFoundError, IllegalTransition (409: not pending) or
    BadRequest: ``at`` naive, earlier than ``publish_min`` after the key was published (verifiers
    may not have it yet), in the past, or more than a year ahead."""
    if at is not None and at.tzinfo is None:
        raise BadRequest("activate_at must carry a time zone (UTC)")
    async with tenant_tx(pool, company_id) as conn:
        r = await conn.fetchrow("SELECT state, state_changed_at FROM company_keys WHERE kid = $1 FOR UPDATE", kid)
        if r is None:
            raise KeyNotFoundError(f"no key {kid}")
        if r["state"] != KeyState.PENDING.value:
            raise IllegalTransition(f"a {r['state']} key cannot be scheduled: only a pending key activates")
        if at is not None:
            earliest = max(now, r["state_changed_at"] + dt.timedelta(seconds=publish_min))
            if at < earliest:
                raise BadRequest(f"activate_at must be at or after {earliest.isoformat()} (published {publish_min} s)")
            if at > now + SCHEDULE_MAX:
                raise BadRequest("activate_at must be within a year")
        row = await conn.fetchrow(f"UPDATE company_keys SET activate_at = $2 WHERE kid = $1 RETURNING {_COLS}", kid, at)
        reason = f"activates at {at.astimezone(dt.UTC).isoformat()}" if at else "schedule cleared"
        await _event(conn, company_id, kid, "pending", "pending", "schedule_activation", actor, reason, now)
    return _row(row)


async def rewrap_company(pool: asyncpg.Pool, company_id: UUID, *, vault: Vault | None = None) -> int:
    """Re-encrypt every key of the company whose KEK is not the current one. Returns the count."""
    ring = (vault or get_vault(pool)).ring
    n = 0
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch("SELECT kid, private_enc FROM company_keys WHERE kek_id <> $1 FOR UPDATE", ring.current)
        for r in rows:
            blob = rewrap(ring, company_id, r["kid"], dict(r["private_enc"]))
            await conn.execute(
                "UPDATE company_keys SET private_enc = $2, kek_id = $3 WHERE kid = $1",
                r["kid"],
                blob,
                ring.current,
            )
            n += 1
    return n

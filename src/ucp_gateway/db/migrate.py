"""SQL migration runner.

Files ``NNNN_name.sql`` ship inside the package (``ucp_gateway/_sql``, the repository's ``migrations/``)
and are applied in order, each in its own transaction, by the owner role. Every applied file is
recorded with its SHA-256 in ``schema_migrations``; a recorded file whose content changed is a hard
error. A session-level advisory lock serialises concurrent gateways so no migration runs twice.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from ..errors import ConfigError

__all__ = ["Migration", "MigrationError", "apply_migrations", "available_migrations", "migration_status"]

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# pg_advisory_lock key: a fixed 64-bit number owned by this project ("ucpgwmig" as ASCII).
_LOCK_KEY = int.from_bytes(b"ucpgwmig", "big") & 0x7FFF_FFFF_FFFF_FFFF

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(ConfigError):
    code = "migration_error"


@dataclass(frozen=True, slots=True)
class Migration:
    version: str  # "0001"
    name: str  # "0001_init.sql"
    sql: str
    checksum: str  # sha-256 hex of the file bytes


def available_migrations() -> list[Migration]:
    """The migrations shipped with this package, in version order. Raises MigrationError on a bad name."""
    out: list[Migration] = []
    root = resources.files("ucp_gateway").joinpath("_sql")
    for entry in root.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        m = _NAME.match(entry.name)
        if not m:
            raise MigrationError(f"migration file name {entry.name!r} does not match NNNN_name.sql")
        data = entry.read_bytes()
        out.append(Migration(m.group(1), entry.name, data.decode("utf-8"), hashlib.sha256(data).hexdigest()))
    out.sort(key=lambda x: x.version)
    versions = [x.version for x in out]
    if len(set(versions)) != len(versions):
        raise MigrationError("two migration files share one version number")
    return out


async def migration_status(conn: asyncpg.Connection) -> tuple[list[Migration], list[str]]:
    """Compare shipped files with the database.

    Returns: ``(pending, problems)``: migrations not yet applied, and human-readable problems
    (changed checksums, versions unknown to this build). Both empty means "current".
    """
    files = available_migrations()
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    applied: dict[str, tuple[str, str]] = {}
    if exists:
        for r in await conn.fetch("SELECT version, name, checksum FROM schema_migrations"):
            applied[r["version"]] = (r["name"], r["checksum"])
    problems: list[str] = []
    pending: list[Migration] = []
    for m in files:
        if m.version not in applied:
            pending.append(m)
        elif applied[m.version][1] != m.checksum:
            problems.append(f"migration {m.name} was changed after it was applied (checksum differs)")
    known = {m.version for m in files}
    for v, (name, _) in sorted(applied.items()):
        if v not in known:
            problems.append(f"database has migration {name} that this gateway does not ship (newer database?)")
    return pending, problems


async def apply_migrations(conn: asyncpg.Connection) -> list[str]:
    """Apply every pending migration as the connected (owner) role.

    Returns: names of the migrations applied now (empty when current).
    Raises: MigrationError on a changed or unknown applied migration, or a failing SQL file (that
    file's transaction is rolled back; earlier ones stay applied).
    """
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(_BOOKKEEPING)
        pending, problems = await migration_status(conn)
        if problems:
            raise MigrationError("; ".join(problems))
        done: list[str] = []
        for m in pending:
            try:
                async with conn.transaction():
                    await conn.execute(m.sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        m.version,
                        m.name,
                        m.checksum,
                    )
            except asyncpg.PostgresError as exc:
                raise MigrationError(f"migration {m.name} failed: {exc.__class__.__name__}: {exc}") from None
            done.append(m.name)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)

"""Open the gateway's database: embedded or external, migrated, with an application-role pool.

Two roles (docs/architecture.md, "Data"):
- the *owner* (the ``DATABASE_URL`` user, or ``postgres`` on the embedded server) owns every table
  and runs migrations;
- the *application role* (``Settings.app_db_role``, member of the ``ucp_app`` group role that the
  migrations grant to) serves requests. It owns nothing and has neither SUPERUSER nor BYPASSRLS, so
  row-level security binds it. :func:`connect_database` refuses to start otherwise (fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from ..config import Settings
from ..errors import ConfigError
from ..jsonbody import db_dumps, db_loads
from .connection import GatewayConnection
from .dsn import check_dsn, with_database, with_user
from .embedded import start_embedded, stop_embedded, supervise_embedded
from .migrate import apply_migrations, migration_status
from .outage import DatabaseHealth

__all__ = ["EMBEDDED_DB_NAME", "Database", "connect_database", "open_database", "owner_connect"]

EMBEDDED_DB_NAME = "ucp_gateway"
_CONNECT_TIMEOUT = 10.0


async def _init_connection(conn: asyncpg.Connection) -> None:
    # json/jsonb as Python values on every pooled connection (json module semantics, orjson speed)
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=db_dumps, decoder=db_loads, schema="pg_catalog")


async def owner_connect(dsn: str) -> asyncpg.Connection:
    """Connect as the owner. Raises ConfigError with one clear line (no password echoed)."""
    check_dsn(dsn)
    try:
        return await asyncpg.connect(dsn, timeout=_CONNECT_TIMEOUT)
    except (TimeoutError, OSError) as exc:
        where = urlsplit(dsn).hostname or "local socket"
        raise ConfigError(f"cannot reach PostgreSQL at {where}: {exc.__class__.__name__}: {exc}") from None
    except asyncpg.InvalidCatalogNameError:
        raise ConfigError(f"database {urlsplit(dsn).path.lstrip('/')!r} does not exist") from None
    except (asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
        raise ConfigError(f"cannot connect to PostgreSQL: {exc.__class__.__name__}: {exc}") from None


async def _ensure_database(owner_dsn: str, name: str) -> None:
    conn = await owner_connect(owner_dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            try:
                await conn.execute(f'CREATE DATABASE "{name}"')
            except asyncpg.DuplicateDatabaseError:
                pass  # another gateway created it first
    finally:
        await conn.close()


async def _ensure_app_role(conn: asyncpg.Connection, role: str, password: str | None) -> None:
    """Create/normalise the login role and grant it the ``ucp_app`` group. Idempotent, race-safe."""
    exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role)
    if not exists:
        try:
            await conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE INHERIT')
        except asyncpg.DuplicateObjectError:
            pass
        except asyncpg.InsufficientPrivilegeError:
            raise ConfigError(
                f"the DATABASE_URL user may not create role {role!r}; create it yourself (LOGIN, no "
                "BYPASSRLS) and set UCPGW_APP_DATABASE_URL"
            ) from None
    if password:
        sql = await conn.fetchval("SELECT format('ALTER ROLE %I PASSWORD %L', $1::text, $2::text)", role, password)
        await conn.execute(sql)
    member = await conn.fetchval("SELECT pg_has_role($1, 'ucp_app', 'MEMBER')", role)
    if not member:
        await conn.execute(f'GRANT ucp_app TO "{role}"')


async def _check_app_role(conn: asyncpg.Connection) -> None:
    row = await conn.fetchrow(
        "SELECT r.rolname, r.rolsuper, r.rolbypassrls, "
        " (SELECT count(*) FROM pg_class c WHERE c.relowner = r.oid AND c.relnamespace = 'public'::regnamespace)"
        "  AS owned FROM pg_roles r WHERE r.rolname = current_user"
    )
    if row["rolsuper"] or row["rolbypassrls"] or row["owned"]:
        raise ConfigError(
            f"application role {row['rolname']!r} can bypass row-level security (superuser, BYPASSRLS or "
            "table owner); refusing to serve"
        )


@dataclass
class Database:
    """The opened database. ``pool`` is the application-role pool every request uses; ``health``
    its up/down state (:class:`.outage.DatabaseHealth`, set by the pool's connection attempts)."""

    pool: asyncpg.Pool
    owner_dsn: str
    app_dsn: str
    embedded: Any | None = None
    health: DatabaseHealth = field(default_factory=DatabaseHealth)
    _closed: bool = field(default=False, repr=False)
    _supervisor: asyncio.Task | None = field(default=None, repr=False)

    def supervise_embedded(self) -> None:
        """Keep the embedded server (if this process started it) running while the database is
        open: restarted when it dies (``db.embedded.supervise_embedded``). Needs a running loop."""
        if self.embedded is not None and self._supervisor is None:
            self._supervisor = asyncio.create_task(supervise_embedded(self.embedded), name="ucpgw-embedded-pg")

    async def _stop_supervising(self) -> None:
        task, self._supervisor = self._supervisor, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def ready(self) -> tuple[bool, str]:
        """Readiness: the database answers and migrations are current. Returns ``(ok, reason)``."""
        try:
            async with self.pool.acquire(timeout=2.0) as conn:
                pending, problems = await migration_status(conn)
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            reason = self.health.snapshot().reason or exc.__class__.__name__
            return False, f"database unreachable: {reason}"
        if problems:
            return False, problems[0]
        if pending:
            return False, f"{len(pending)} migration(s) pending"
        return True, "ok"

    async def close(self) -> None:
        """Close the pool, then stop the embedded server (if this process started it)."""
        if self._closed:
            return
        self._closed = True
        await self._stop_supervising()  # before the stop: a restart never races it
        try:
            await asyncio.wait_for(self.pool.close(), timeout=10)
        except TimeoutError:
            self.pool.terminate()
        if self.embedded is not None:
            await stop_embedded(self.embedded)


async def connect_database(settings: Settings, *, migrate: bool = True) -> Database:
    """Start or reach PostgreSQL, apply migrations (as owner) and open the app-role pool.

    Raises: ConfigError (unwritable data dir, malformed/unreachable DSN, migration problems, an app
    role that could bypass RLS).
    """
    embedded = None
    if settings.app_database_url:  # before anything starts: a bad one was an asyncpg traceback
        check_dsn(settings.app_database_url, name="UCPGW_APP_DATABASE_URL")
    if settings.database_url:
        owner_dsn = check_dsn(settings.database_url)
    else:
        embedded, base_dsn = await start_embedded(settings.data_dir)
        try:
            await _ensure_database(base_dsn, EMBEDDED_DB_NAME)
        except BaseException:
            await stop_embedded(embedded)
            raise
        owner_dsn = with_database(base_dsn, EMBEDDED_DB_NAME)
    try:
        password = settings.app_db_password.get_secret_value() if settings.app_db_password else None
        conn = await owner_connect(owner_dsn)
        try:
            if migrate:
                await apply_migrations(conn)
            if not settings.app_database_url:
                await _ensure_app_role(conn, settings.app_db_role, password)
        finally:
            await conn.close()
        app_dsn = settings.app_database_url or with_user(owner_dsn, settings.app_db_role, password)
        health = DatabaseHealth()
        try:
            pool = await asyncpg.create_pool(
                app_dsn,
                min_size=settings.db_pool_min,
                max_size=settings.db_pool_size,
                init=_init_connection,
                timeout=_CONNECT_TIMEOUT,
                connection_class=GatewayConnection,  # server reset only when session state may remain
                connect=health.connect,  # an outage: DatabaseUnavailable, and one log line per change
            )
        except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
            raise ConfigError(
                f"application role cannot connect ({exc.__class__.__name__}: {exc}); set "
                "UCPGW_APP_DB_PASSWORD or UCPGW_APP_DATABASE_URL"
            ) from None
        try:
            async with pool.acquire() as c:
                await _check_app_role(c)
        except BaseException:
            await pool.close()
            raise
    except BaseException:
        if embedded is not None:
            await stop_embedded(embedded)
        raise
    db = Database(pool=pool, owner_dsn=owner_dsn, app_dsn=app_dsn, embedded=embedded, health=health)
    db.supervise_embedded()
    return db


@asynccontextmanager
async def open_database(settings: Settings, *, migrate: bool = True) -> AsyncIterator[Database]:
    """``async with open_database(settings) as db:`` — :func:`connect_database`, closed on exit."""
    db = await connect_database(settings, migrate=migrate)
    try:
        yield db
    finally:
        await db.close()

"""Database outages: which failures mean "the database is unavailable", and the state they set.

A database that is down, restarting, out of connections or out of disk is an *outage*: every
transport answers it as 503 with ``Retry-After`` and a JSON body (:class:`DatabaseUnavailable`),
logs nothing per request, and recovers by itself once connections succeed again (asyncpg's pool
reconnects on the next acquire). Everything else a query raises stays what it was (a bug is a 500,
never a 503 that invites a retry).

Outage failures (:func:`is_outage`):

- connecting fails: refused, no socket, a network or connect timeout (``OSError``,
  ``TimeoutError``), or the server refuses new sessions (SQLSTATE 57P03 starting up / shutting down,
  class 53 too many connections / disk full / out of memory, class 08 connection exceptions);
- a live session is lost: 08003/08006 (``ConnectionDoesNotExistError``: the server went away
  mid-query), 57P01 / 57P02 (terminated by an administrator or a crash of another backend).

:class:`DatabaseHealth` is the per-database up/down state. Only connection attempts change it (the
pool's ``connect``, :meth:`DatabaseHealth.connect`) and readiness probes, so one query that fails on
a stale connection does not flip it: one log line per change (``database_unavailable`` with the
failure's class name, ``database_available`` with how long it was down), never one per request.
:meth:`DatabaseHealth.snapshot` is what metrics and ``/readyz`` read.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import asyncpg

from ..errors import ServiceUnavailable
from ..logs import get_logger

__all__ = ["RETRY_AFTER", "DatabaseHealth", "DatabaseUnavailable", "HealthSnapshot", "as_outage", "is_outage"]

_log = get_logger("ucp_gateway.db.outage")

#: Seconds a client is told to wait (``Retry-After``) while the database is unavailable.
RETRY_AFTER = 1

_SESSION_LOST = (
    asyncpg.PostgresConnectionError,  # class 08, ConnectionDoesNotExistError among them
    asyncpg.CannotConnectNowError,  # 57P03
    asyncpg.AdminShutdownError,  # 57P01
    asyncpg.CrashShutdownError,  # 57P02
    asyncpg.InsufficientResourcesError,  # class 53: too many connections, disk full, out of memory
)


class DatabaseUnavailable(ServiceUnavailable, ConnectionError):
    """503 ``unavailable``: the database cannot be reached now (retry after ``RETRY_AFTER`` s).

    Also a ``ConnectionError`` (an ``OSError``), so code that already treats a database's
    ``OSError`` as transient (background loops, the verb runtime) treats this alike."""

    def __init__(self, message: str = "the database is unavailable; retry shortly"):
        super().__init__(message, details={"retry_after": RETRY_AFTER})


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` means the database is unavailable (module doc), not a fault of the query."""
    return isinstance(exc, (DatabaseUnavailable, *_SESSION_LOST))


def as_outage(exc: BaseException) -> DatabaseUnavailable | None:
    """``exc`` as the :class:`DatabaseUnavailable` to answer with, or None when it is no outage."""
    if isinstance(exc, DatabaseUnavailable):
        return exc
    return DatabaseUnavailable() if is_outage(exc) else None


class _QuietOutages(logging.Filter):
    """Drops asyncpg's pool records caused by an outage: asyncpg logs a traceback on every retry of
    its connection floor (``Failed to restore the pool connection floor``) while the server is gone,
    and the outage is already on one ``database_unavailable`` line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, DatabaseUnavailable)


_POOL_LOG = logging.getLogger("asyncpg.pool")
if not any(isinstance(f, _QuietOutages) for f in _POOL_LOG.filters):
    _POOL_LOG.addFilter(_QuietOutages())


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    """``up``; ``since``: wall-clock seconds (UTC epoch) of the last change; ``reason``: the class
    name of the failure that took it down (None while up); ``outages``: changes to down so far."""

    up: bool
    since: float
    reason: str | None
    outages: int


class DatabaseHealth:
    """Up/down state of one database, changed by connection attempts (module doc)."""

    def __init__(self) -> None:
        self._up = True
        self._since = time.time()
        self._reason: str | None = None
        self._outages = 0

    @property
    def up(self) -> bool:
        return self._up

    def snapshot(self) -> HealthSnapshot:
        return HealthSnapshot(self._up, self._since, self._reason, self._outages)

    def mark_down(self, exc: BaseException) -> None:
        """Record a failed connection attempt; logs ``database_unavailable`` when it was up."""
        if self._up:
            self._up, self._since, self._reason = False, time.time(), exc.__class__.__name__
            self._outages += 1
            _log.warning("database_unavailable", reason=self._reason)

    def mark_up(self) -> None:
        """Record a successful connection; logs ``database_available`` when it was down."""
        if not self._up:
            down = time.time() - self._since
            self._up, self._since, self._reason = True, time.time(), None
            _log.info("database_available", down_seconds=round(down, 3))

    async def connect(self, *args: Any, **kwargs: Any) -> asyncpg.Connection:
        """The pool's ``connect`` (``asyncpg.create_pool(connect=...)``): ``asyncpg.connect`` that
        records the outcome. Raises DatabaseUnavailable for an outage failure (module doc); any
        other error (a wrong password, a missing database) as asyncpg raised it."""
        try:
            conn = await asyncpg.connect(*args, **kwargs)
        except (OSError, TimeoutError, *_SESSION_LOST) as exc:
            self.mark_down(exc)
            raise DatabaseUnavailable() from None
        self.mark_up()
        return conn

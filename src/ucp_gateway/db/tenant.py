"""Units of work in a tenant context.

Row-level security policies read ``app_company_id()`` (migration 0001), which is
``NULLIF(current_setting('app.company_id', true), '')::uuid``. ``SET LOCAL`` (via ``set_config(...,
true)``) scopes the setting to the transaction, so a pooled connection never carries one tenant's
context into the next unit of work.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from uuid import UUID

import asyncpg

from .. import metrics
from .outage import DatabaseUnavailable

__all__ = ["COMMIT_PROBE", "CommitProbe", "platform_scan_tx", "platform_tx", "tenant_tx"]

_POOL_WAIT = metrics.DB_POOL_WAIT.labels("app")  # a tenant or platform unit waiting for a connection


class CommitProbe:
    """One read sent in the ``COMMIT`` round trip of the tenant transactions of a request.

    Set :data:`COMMIT_PROBE` to a probe (in the request's context) and set ``armed``; each
    :func:`tenant_tx` that commits while it is armed sends ``sql`` right after its ``COMMIT`` (same
    round trip, its own implicit transaction, see ``GatewayConnection.after_commit``) and stores the
    statement's command status in ``status`` (``"SELECT 1"``: one row). Every transaction unit that
    starts clears ``status`` first, so it is the answer of the last one, and None when that one did
    not commit armed on a :class:`.connection.GatewayConnection` (the reader then fails closed).
    ``sql`` must be a read of constant or validated text (never raw input) that sets its own tenant
    context: none is left once the transaction has ended.
    """

    __slots__ = ("armed", "sql", "status")

    def __init__(self, sql: str):
        self.sql = sql
        self.armed = False
        self.status: str | None = None


#: The request's :class:`CommitProbe` (None: no probe).
COMMIT_PROBE: ContextVar[CommitProbe | None] = ContextVar("ucpgw_commit_probe", default=None)


class _Unit:
    """A transaction whose first statement sets the context: ``fused`` (validated text) goes out
    with ``BEGIN`` in one round trip on a :class:`.connection.GatewayConnection`; otherwise (other
    connection classes, or ``fused`` None) ``sql`` with ``args`` runs as its own statement.
    ``then`` (validated text, no parameters) runs right after the context, in the same round trip
    when ``fused`` goes out with ``BEGIN``.

    The steps of ``async with pool.acquire() as conn: async with conn.transaction(...): ...`` written
    as one async context manager object: every request opens one, and a generator-based
    ``@asynccontextmanager`` (two of them, nested, before) costs a generator, a helper call and an
    ``anext`` per enter and exit. tests/db/test_tenant_unit.py holds the generator form as the reference.
    """

    __slots__ = (
        "_acq", "_after", "_after_commit", "_args", "_conn", "_fused", "_isolation", "_pool", "_probe", "_sql", "_then",
        "_tx",
    )  # fmt: skip

    def __init__(
        self,
        pool: asyncpg.Pool,
        fused: str | None,
        sql: str,
        args: tuple[str, ...],
        isolation: str | None,
        then: str | None = None,
    ):
        self._pool, self._fused, self._sql, self._args = pool, fused, sql, args
        self._isolation, self._then = isolation, then

    async def __aenter__(self) -> asyncpg.Connection:
        acq = self._acq = self._pool.acquire()
        t0 = time.perf_counter()
        conn = await acq.__aenter__()
        _POOL_WAIT.observe(time.perf_counter() - t0)
        try:
            fused, then = self._fused, self._then
            after = self._after = getattr(conn, "after_begin", None) if fused is not None else None
            # bound now: a proxy whose connection the server dropped has none to delegate to, and an
            # AttributeError would then hide the connection error (an outage) behind a bug
            self._after_commit = conn.after_commit if after is not None else None
            if after is not None:
                after(fused if then is None else f"{fused}; {then}")
            try:
                probe = self._probe = COMMIT_PROBE.get()
                if probe is not None:
                    probe.status = None  # the answer of this request's last tenant transaction, or none
                tx = self._tx = conn.transaction(isolation=self._isolation)
                await tx.__aenter__()
                try:
                    if after is None or not conn.begin_consumed():
                        if after is not None:
                            after(None)
                        await conn.execute(self._sql, *self._args)
                        if then is not None:
                            await conn.execute(then)
                except BaseException as exc:
                    await tx.__aexit__(type(exc), exc, exc.__traceback__)  # rolls back; re-raised below
                    raise
            except BaseException:
                if after is not None:
                    after(None)
                    self._after_commit(None)
                raise
        except BaseException as exc:
            await acq.__aexit__(type(exc), exc, exc.__traceback__)
            if _lost(conn, exc):
                raise DatabaseUnavailable() from exc
            raise
        self._conn = conn
        return conn

    async def __aexit__(self, et, ev, tb) -> bool:
        conn, probe, after = self._conn, self._probe, self._after
        try:
            try:
                sent = et is None and probe is not None and probe.armed and after is not None
                if sent:
                    self._after_commit(probe.sql)  # only on the way to COMMIT (not on a rollback)
                await self._tx.__aexit__(et, ev, tb)  # COMMIT, or ROLLBACK when the body raised
                if sent:
                    probe.status = conn.commit_status()
            finally:
                if after is not None:
                    after(None)
                    self._after_commit(None)
        except BaseException as exc:
            await self._acq.__aexit__(type(exc), exc, exc.__traceback__)
            if _lost(conn, exc) or (ev is not None and _lost(conn, ev)):
                raise DatabaseUnavailable() from exc
            raise
        await self._acq.__aexit__(et, ev, tb)
        if ev is not None and _lost(conn, ev):
            raise DatabaseUnavailable() from ev
        return False  # the body's exception (if any) propagates


def _lost(conn: asyncpg.Connection, exc: BaseException) -> bool:
    """True when ``exc`` is asyncpg's client-side complaint about a connection the server dropped
    under it ("the underlying connection is closed", "another operation is in progress" from a
    protocol left mid-operation): the outage it is, answered 503 (``outage.DatabaseUnavailable``).
    The same complaints on a live connection are bugs and stay what they are."""
    if not isinstance(exc, (asyncpg.InterfaceError, asyncpg.InternalClientError)):
        return False
    try:
        return conn.is_closed()
    except asyncpg.InterfaceError:  # a pool proxy whose connection was already taken away
        return True


# company id -> its validated text and the set_config statement (bounded; one entry per tenant)
_CID_SQL: dict[object, tuple[str, str]] = {}


def tenant_tx(
    pool: asyncpg.Pool, company_id: UUID | str, *, isolation: str = "read_committed", then: str | None = None
) -> _Unit:
    """Run one transaction as company ``company_id``; RLS shows and accepts only its rows.

    Use as ``async with tenant_tx(pool, company_id) as conn:``.

    Args:
        pool: the application-role pool (never the owner pool: the owner bypasses nothing, but
            the point is that the app role cannot).
        company_id: the tenant's UUID.
        isolation: asyncpg isolation level name.
        then: a first statement of the unit, sent in the same round trip as ``BEGIN`` and the
            context: constant or validated text only (never raw input), no parameters, no result
            (it may raise: then nothing of the unit ran and the error propagates).
    Yields: the connection, inside an open transaction (``BEGIN`` and the context in one round
    trip). Commits on normal exit, rolls back on error. Raises ValueError for a malformed UUID.
    """
    uid = isinstance(company_id, UUID)  # asyncpg's UUID too: equal values, equal canonical text
    hit = _CID_SQL.get(company_id) if uid else None
    if hit is None:
        cid = str(UUID(str(company_id)))  # validated (canonical hex and hyphens): safe to inline
        hit = (cid, f"SELECT set_config('app.company_id', '{cid}', true)")
        if uid:
            if len(_CID_SQL) >= 4096:
                _CID_SQL.clear()
            _CID_SQL[company_id] = hit
    cid, fused = hit
    return _Unit(pool, fused, "SELECT set_config('app.company_id', $1, true)", (cid,), isolation, then)


@asynccontextmanager
async def platform_tx(pool: asyncpg.Pool, *, isolation: str = "read_committed") -> AsyncIterator[asyncpg.Connection]:
    """One transaction with no tenant context: tenant tables show no rows; platform tables are open."""
    sql = "SELECT set_config('app.company_id', '', true)"
    async with _Unit(pool, sql, sql, (), isolation) as conn:
        yield conn


_SCOPE = re.compile(r"[a-z_]{1,63}")


@asynccontextmanager
async def platform_scan_tx(
    pool: asyncpg.Pool, scope: str, *, role: str | None = None
) -> AsyncIterator[asyncpg.Connection]:
    """A platform transaction that may see every tenant's rows of the tables whose policy names
    ``scope`` (``current_setting('app.platform_scan') = scope``), e.g. ``"webhook_queue"`` for the
    delivery worker. Cross-tenant access is thus explicit and scoped to one table; a transaction
    with no context at all still sees no tenant rows.

    ``role``: the transaction runs as that role (``SET LOCAL ROLE``), e.g. ``"ucp_scan"``
    (migration 0090), which may read only the columns that say what is due, and whose policies
    are the ones naming ``scope``. Raises ValueError for a ``scope`` or ``role`` that is not a
    plain lower-case name.
    """
    sql = "SELECT set_config('app.company_id', '', true), set_config('app.platform_scan', $1, true)"
    if role is not None and not _SCOPE.fullmatch(role):
        raise ValueError(f"not a role name: {role!r}")
    then = f"SET LOCAL ROLE {role}" if role is not None else None
    if role is not None and not _SCOPE.fullmatch(scope):
        raise ValueError(f"not a scan scope: {scope!r}")
    fused = sql.replace("$1", f"'{scope}'") if _SCOPE.fullmatch(scope) else None
    async with _Unit(pool, fused, sql, (scope,), None, then) as conn:
        yield conn

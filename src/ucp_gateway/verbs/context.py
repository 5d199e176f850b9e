"""What a verb handler sees: :class:`VerbContext` (and :class:`RevertContext` for revert handlers).

Handlers run inside the dispatcher's tenant transaction: every write they make, the audit row, the
idempotency record and the cap count commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg

from ..tenancy import Company
from .policy import Principal

if TYPE_CHECKING:
    from .registry import Registry, Verb

__all__ = ["RevertContext", "VerbContext", "VerbRunner"]


class VerbRunner(Protocol):
    """What a handler may ask of the dispatcher running it (``verbs.dispatcher.Dispatcher`` is one;
    a protocol here, so that this module, which the dispatcher imports, does not import it back)."""

    registry: Registry

    async def run_child(self, parent: VerbContext, name: str, raw_args: Mapping[str, Any]) -> dict[str, Any]: ...


@dataclass
class VerbContext:
    """Arguments and services of one execution.

    Attributes:
        conn: the open tenant transaction (RLS: this company only).
        args: validated arguments (control keys removed); company_id/user_id never appear here.
        principal, company, now (aware UTC), verb, dispatcher (for child verbs).
    """

    conn: asyncpg.Connection
    args: Mapping[str, Any]
    principal: Principal
    company: Company
    now: datetime
    verb: Verb
    dispatcher: VerbRunner
    rollback_handle: str | None = None
    revert_data: dict[str, Any] | None = None
    entity: dict[str, Any] | None = None
    children: list[int] = field(default_factory=list)
    transaction_id: str | None = None
    # set by the dispatcher when a closing statement of its own follows the handler
    defer_last_write: bool = field(default=False, repr=False)
    last_write: tuple[str, tuple[Any, ...], str] | None = field(default=None, repr=False)
    # write_last(..., otherwise=): what the handler answers when its deferred, guarded write wrote nothing
    otherwise: Callable[[], Awaitable[Mapping[str, Any]]] | None = field(default=None, repr=False)

    async def write_last(
        self,
        sql: str,
        *args: Any,
        ctes: str = "",
        otherwise: Callable[[], Awaitable[Mapping[str, Any]]] | None = None,
    ) -> bool | None:
        """Run ``sql`` as this handler's last statement: one data-modifying statement whose result
        the handler does not read (``$n`` parameters, no other ``$``, no RETURNING), optionally
        preceded by ``ctes`` (``name AS (...), ...``: data-modifying WITH items sharing its
        parameters, none named ``w``, ``a`` or ``f``). Where the dispatcher closes the execution
        with a statement of its own (a write with its audit row and idempotency record), the write
        goes out inside that statement, saving a round trip; it commits or fails with everything
        else all the same. Elsewhere, or for a second call, it runs at once. The handler must send
        nothing after it.

        ``otherwise`` makes the write guarded: when ``sql`` writes no row, the writer must have
        written nothing at all (its ``ctes`` share the condition), and the handler's answer is that
        of ``otherwise()`` (an async callable returning the handler's result, run in the same
        transaction; it may call write_last again, unguarded). Deferred, the closing statement then
        writes no audit row nor idempotency record either, and the dispatcher awaits ``otherwise``
        and closes again with its result. Returns: None when deferred; else whether ``sql`` wrote a
        row (run at once, the handler itself answers a False: ``otherwise`` is not called)."""
        if self.last_write is not None or not self.defer_last_write:
            await self.flush_last_write()
            if not self.defer_last_write:
                if otherwise is None and not ctes:
                    await self.conn.execute(sql, *args)
                    return True
                return await self.conn.fetchval(_at_once(sql, ctes), *args) is not None
        self.last_write, self.otherwise = (sql, args, ctes), otherwise
        return None

    async def flush_last_write(self) -> None:
        """Run a deferred :meth:`write_last` now (the dispatcher's paths without a closing statement).

        Raises RuntimeError when a guarded write (``otherwise``) wrote nothing: its fallback needs
        the closing statement (a guarded write must be the handler's last)."""
        pending, self.last_write = self.last_write, None
        otherwise, self.otherwise = self.otherwise, None
        if pending is not None:
            sql, args, ctes = pending
            if otherwise is None and not ctes:
                await self.conn.execute(sql, *args)
            elif await self.conn.fetchval(_at_once(sql, ctes), *args) is None and otherwise is not None:
                raise RuntimeError("a guarded write_last wrote nothing and was not the handler's last")

    def set_revert(self, handle: str, data: dict[str, Any]) -> None:
        """Record how to undo this write: an opaque handle and the data the revert handler needs
        (JSON without floats; stored in the audit row)."""
        self.rollback_handle, self.revert_data = handle, data

    def set_entity(self, entity_type: str, entity_id: str | int) -> None:
        """The entity this call is about (shown by audit.trail)."""
        self.entity = {"type": entity_type, "id": entity_id}

    async def emit(
        self, type_: str, entity_type: str, entity_id: str | int, data: Mapping[str, Any] | None = None
    ) -> None:
        """Append a business event (read by events.subscribe / events.poll) in this transaction."""
        await self.conn.execute(
            "INSERT INTO agent_events (company_id, type, entity_type, entity_id, data, created_at) "
            "VALUES ($1, $2, $3, $4, $5::jsonb, $6)",
            self.company.id,
            type_,
            entity_type,
            str(entity_id),
            dict(data or {}),
            self.now,
        )

    async def run_child(self, verb: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run a child write in this transaction (transaction / macro steps); returns its receipt.

        Raises VerbError (the whole transaction then rolls back).
        """
        return await self.dispatcher.run_child(self, verb, args)


def _at_once(sql: str, ctes: str) -> str:
    """A deferred write as a statement of its own, returning a row when ``sql`` wrote one."""
    return ("WITH " + ctes + " " if ctes else "") + sql + " RETURNING 1"


@dataclass
class RevertContext:
    """What a revert handler gets: the transaction, who reverts, and the original audit entry."""

    conn: asyncpg.Connection
    principal: Principal
    company: Company
    now: datetime
    entry: Mapping[str, Any]
    audit_id: int
    dispatcher: VerbRunner

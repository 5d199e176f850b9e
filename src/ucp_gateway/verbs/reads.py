"""READ dispatches in group transactions: the verbs' own group commit.

Every READ dispatch still runs its handler in its company's tenant context and gets its own audit
row before it answers, but concurrent READ dispatches of one company share transactions: up to
``parallel`` drainers (2 by default) take batches off the company's queue; each runs its batch's
handlers in turn on one connection, appends all their audit rows in one call and commits once
(asynchronously: see :func:`tenant_conn`). A database error aborts the shared
transaction; the batch is then re-run one dispatch per transaction so one bad call cannot fail
the others. This is what lets the per-company hash chain sustain >= 1,000 audited reads/s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from ..db import tenant_tx
from ..tenancy import Company
from .audit import append_many
from .decide import Call, Decision
from .policy import Principal
from .registry import Verb

__all__ = ["MAX_BATCH", "ReadBatcher", "ReadJob", "tenant_conn"]

MAX_BATCH = 64


@asynccontextmanager
async def tenant_conn(pool: asyncpg.Pool, company_id: UUID, *, durable: bool) -> AsyncIterator[asyncpg.Connection]:
    """A tenant transaction like ``db.tenant_tx``.

    ``durable=True`` (writes) is :func:`db.tenant_tx` (an asyncpg transaction whose ``BEGIN``
    carries the context), so handlers may nest savepoints with ``conn.transaction()``.
    ``durable=False`` (READ group transactions) opens in one round trip and commits without
    waiting for the WAL flush (``synchronous_commit=off``): a crash may lose the last moments of
    READ audit rows, never a write's, and never leaves a gap in the chain (a later synchronous
    commit flushes every earlier commit record); it also keeps the per-company chain lock from
    being held across an fsync. READ handlers must not call ``conn.transaction()``.
    """
    if durable:
        async with tenant_tx(pool, company_id) as conn:
            yield conn
        return
    cid = str(UUID(str(company_id)))  # validated: safe to inline
    async with pool.acquire() as conn:
        await conn.execute(
            f"BEGIN; SELECT set_config('app.company_id', '{cid}', true), set_config('synchronous_commit', 'off', true)"
        )
        try:
            yield conn
        except BaseException:
            if not conn.is_closed():
                await conn.execute("ROLLBACK")
            raise
        await conn.execute("COMMIT")


@dataclass
class ReadJob:
    """One READ dispatch waiting for its turn in a group transaction."""

    principal: Principal
    company: Company
    call: Call
    verb: Verb
    decision: Decision
    now: datetime
    t0: float


# async (conn, job) -> (envelope without audit_id, audit entry); raises asyncpg errors only
RunOne = Callable[[asyncpg.Connection, ReadJob], Awaitable[tuple[dict[str, Any], dict[str, Any]]]]


class ReadBatcher:
    """Per-company queues of READ jobs, drained by at most ``parallel`` tasks at a time.

    Args:
        pool: the application pool. run_in: ``async (conn, job) -> envelope`` running one job
        inside an open tenant transaction (raises asyncpg errors only).
    """

    def __init__(self, pool: asyncpg.Pool, run_in: RunOne, *, parallel: int | None = None):
        self.pool, self.run_in = pool, run_in
        # group transactions of one company in flight at once (the rest of the pool serves others)
        self.parallel = parallel or max(1, min(2, pool.get_max_size() // 2))
        self._queues: dict[UUID, list[tuple[ReadJob, asyncio.Future]]] = {}
        self._draining: dict[UUID, int] = {}
        self._tasks: set[asyncio.Task] = set()

    async def submit(self, job: ReadJob) -> dict[str, Any]:
        """Queue ``job`` and wait for its envelope."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        cid = job.company.id
        self._queues.setdefault(cid, []).append((job, fut))
        if self._draining.get(cid, 0) < self.parallel:
            self._draining[cid] = self._draining.get(cid, 0) + 1
            task = asyncio.create_task(self._drain(cid))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await fut

    async def _drain(self, cid: UUID) -> None:
        try:
            while self._queues.get(cid):
                queue = self._queues[cid]
                size = max(1, min(MAX_BATCH, -(-len(queue) // self._draining[cid])))  # share the queue
                batch, self._queues[cid] = queue[:size], queue[size:]
                await self._run(cid, batch)
        finally:
            left = self._draining[cid] - 1
            if left:
                self._draining[cid] = left
            else:
                del self._draining[cid]
                if not self._queues.get(cid):
                    self._queues.pop(cid, None)

    async def _run(self, cid: UUID, batch: list[tuple[ReadJob, asyncio.Future]]) -> None:
        try:
            async with tenant_conn(self.pool, cid, durable=False) as conn:
                out = [await self.run_in(conn, job) for job, _ in batch]
                ids = await append_many(conn, cid, [entry for _, entry in out])
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            if len(batch) == 1:
                _settle(batch[0][1], exc=exc)
                return
            for job, fut in batch:  # isolate the failing call: one transaction each
                await self._run(cid, [(job, fut)])
            return
        except BaseException as exc:  # cancelled or a bug: every waiter learns of it
            for _, fut in batch:
                _settle(fut, exc=exc)
            raise
        for (_, fut), (env, _), audit_id in zip(batch, out, ids, strict=True):
            _settle(fut, {**env, "audit_id": audit_id})


def _settle(fut: asyncio.Future, value: Any = None, *, exc: BaseException | None = None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)

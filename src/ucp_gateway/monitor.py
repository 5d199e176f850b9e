"""The metrics that need a read or a write of the database, every ``metrics_interval`` seconds.

- Pool use of this process (``ucpgw_db_pool_connections{state}``: in_use, idle, max).
- Across companies, one read each under the scan scope ``metrics`` as ``ucp_scan`` (migration
  0087): webhook queue depth, age of the oldest undelivered event and dead letters per company,
  signing keys per company and state. Every worker reads them; a scrape shows the most recent reading.
- The flush of this process's per-minute SLO counts (``metrics.SLO_PENDING``) into
  ``request_slo_minutes``, one upsert per company in its tenant transaction (also at shutdown).

One ``setup(app)`` in ``app.COMPONENTS`` (when ``metrics_enabled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
from aiohttp import web

from . import metrics
from .appkeys import DATABASE, SETTINGS
from .db import tenant_tx
from .errors import GatewayError
from .periodic import due_scan

__all__ = ["flush_slo", "sample", "setup"]

_log = logging.getLogger("ucp_gateway.monitor")

_KEY_STATES = ("pending", "active", "rotating", "retired", "compromised")

_QUEUE_SQL = (
    "SELECT c.slug, q.depth, q.oldest FROM (SELECT company_id, count(*)::bigint AS depth, min(enqueued_at) AS oldest"
    " FROM webhook_queue GROUP BY company_id) q JOIN companies c ON c.id = q.company_id"
)
_DEAD_SQL = (
    "SELECT c.slug, d.n FROM (SELECT company_id, count(*)::bigint AS n FROM webhook_outbox"
    " WHERE dead_at IS NOT NULL GROUP BY company_id) d JOIN companies c ON c.id = d.company_id"
)
_KEYS_SQL = (
    "SELECT c.slug, k.state, count(*)::bigint AS n FROM company_keys k JOIN companies c ON c.id = k.company_id"
    " GROUP BY c.slug, k.state"
)
_UPSERT_SQL = (
    "INSERT INTO request_slo_minutes AS t (company_id, minute, operation, requests, errors, buckets)"
    " VALUES ($1, $2, $3, $4, $5, $6)"
    " ON CONFLICT (company_id, operation, minute) DO UPDATE SET requests = t.requests + EXCLUDED.requests,"
    " errors = t.errors + EXCLUDED.errors,"
    " buckets = ARRAY(SELECT a + b FROM unnest(t.buckets, EXCLUDED.buckets) AS u(a, b))"
)


class _Seen:
    """The company labels a gauge was last set for, so that one gone from a reading drops to 0."""

    def __init__(self) -> None:
        self.labels: set[tuple[str, ...]] = set()

    def update(self, gauge: Any, values: dict[tuple[str, ...], float]) -> None:
        for labels in self.labels - values.keys():
            gauge.labels(*labels).set(0)
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        self.labels = set(values)


_queue_seen, _oldest_seen, _keys_seen, _dead_seen = _Seen(), _Seen(), _Seen(), _Seen()


def sample_pool(pool: asyncpg.Pool) -> None:
    size, idle = pool.get_size(), pool.get_idle_size()
    metrics.DB_POOL.labels("in_use").set(size - idle)
    metrics.DB_POOL.labels("idle").set(idle)
    metrics.DB_POOL.labels("max").set(pool.get_max_size())


async def sample(pool: asyncpg.Pool, now: datetime | None = None) -> None:
    """Read the database gauges once (two reads under the ``metrics`` scan scope)."""
    now = now or datetime.now(UTC)
    sample_pool(pool)
    depth: dict[tuple[str, ...], float] = {}
    oldest: dict[tuple[str, ...], float] = {}
    for r in await due_scan(pool, "metrics", _QUEUE_SQL):
        key = (metrics.company_label(_Slug(r["slug"])),)
        depth[key] = depth.get(key, 0) + r["depth"]
        oldest[key] = max(oldest.get(key, 0.0), max(0.0, (now - r["oldest"]).total_seconds()))
    _queue_seen.update(metrics.WEBHOOK_QUEUE, depth)
    _oldest_seen.update(metrics.WEBHOOK_OLDEST, oldest)
    dead = {
        (metrics.company_label(_Slug(r["slug"])),): float(r["n"]) for r in await due_scan(pool, "metrics", _DEAD_SQL)
    }
    _dead_seen.update(metrics.WEBHOOK_DEAD, dead)
    keys: dict[tuple[str, ...], float] = defaultdict(float)
    for r in await due_scan(pool, "metrics", _KEYS_SQL):
        if r["state"] in _KEY_STATES:
            keys[(metrics.company_label(_Slug(r["slug"])), r["state"])] += r["n"]
    _keys_seen.update(metrics.SIGNING_KEYS, dict(keys))


class _Slug:
    __slots__ = ("slug",)

    def __init__(self, slug: str) -> None:
        self.slug = slug


async def flush_slo(pool: asyncpg.Pool) -> int:
    """Write what this process counted since the last flush into request_slo_minutes; returns the
    rows written. A company whose write fails gets its counts back for the next flush."""
    pending = metrics.take_slo_pending()
    by_company: dict[Any, list[tuple]] = defaultdict(list)
    for (company_id, op, minute), row in pending.items():
        when = datetime.fromtimestamp(minute, UTC)
        by_company[company_id].append((company_id, when, op, row[0], row[1], row[2:]))
    written = 0
    for company_id, rows in by_company.items():
        try:
            async with tenant_tx(pool, company_id) as conn:
                await conn.executemany(_UPSERT_SQL, rows)
            written += len(rows)
        except asyncpg.ForeignKeyViolationError:  # the company is gone: nothing to keep its counts for
            continue
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError, GatewayError) as exc:
            _log.warning("slo flush failed: %s", exc.__class__.__name__)
            for _, when, op, *counts in rows:  # back into the next flush
                key = (company_id, op, int(when.timestamp()))
                row = metrics.SLO_PENDING.setdefault(key, [0] * (len(metrics.SLO_BUCKETS) + 3))
                merged = [counts[0], counts[1], *counts[2]]
                for i, v in enumerate(merged):
                    row[i] += v
    return written


async def _round(app: web.Application) -> None:
    pool = app[DATABASE].pool
    await flush_slo(pool)
    await sample(pool)


async def _loop(app: web.Application, interval: float) -> None:
    while True:
        try:
            await _round(app)
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError, GatewayError) as exc:
            _log.warning("metrics round failed: %s", exc.__class__.__name__)
        await asyncio.sleep(interval)


async def _monitor_ctx(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(_loop(app, app[SETTINGS].metrics_interval), name="ucpgw-metrics")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(asyncpg.PostgresError, OSError, asyncpg.InterfaceError, GatewayError):
            await flush_slo(app[DATABASE].pool)  # what the last interval counted


def setup(app: web.Application) -> None:
    settings = app[SETTINGS]
    metrics.configure(settings.metrics_companies)
    if settings.metrics_enabled:
        app.cleanup_ctx.append(_monitor_ctx)

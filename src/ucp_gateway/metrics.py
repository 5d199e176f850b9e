"""Prometheus metrics of the gateway (prometheus-client; docs/operations.md, Metrics).

Every metric is declared here, and recording one is a one-liner where it happens::

    from ..metrics import counter
    WIDGETS = counter("widgets", "Widgets made, by outcome.", ("outcome",))
    WIDGETS.labels("ok").inc()

Names get the ``ucpgw_`` prefix. Labels must be bounded: fixed words, error codes from the source,
route templates (never a raw path), company slugs only through :func:`company_label` (at most
``metrics_companies`` distinct slugs a process, the rest ``_other``).

Several processes (``serve --workers N``) share one scrape through prometheus-client's multiprocess
mode: the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` before it spawns the workers, each worker
writes its samples to its own memory-mapped files there, and the supervisor's metrics listener
(:func:`metrics_app`) adds them up. One process serves its own registry.
"""

from __future__ import annotations

import os
import re
import time
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

__all__ = [
    "CONSENT",
    "DB_POOL",
    "DB_POOL_WAIT",
    "ERRORS",
    "IDEMPOTENCY",
    "NEGOTIATIONS",
    "OPERATION",
    "OPERATIONS",
    "REQUESTS",
    "RESPONSE_SIGNATURES",
    "SIGNATURES",
    "SIGNING_KEYS",
    "SLO_BUCKETS",
    "WEBHOOK_DEAD",
    "WEBHOOK_DELIVERIES",
    "WEBHOOK_OLDEST",
    "WEBHOOK_QUEUE",
    "company_label",
    "counter",
    "gauge",
    "histogram",
    "metrics_app",
    "observe_request",
    "render",
]

PREFIX = "ucpgw_"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Request duration buckets (seconds) that answer the platforms' checkout targets exactly: p50 <= 1 s
#: and p95 <= 4-5 s for create/update, p50 <= 6 s and p95 <= 10 s for complete; the small ones
#: show the usual tens of milliseconds.
SLO_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 6.0, 10.0, 30.0)


def counter(name: str, doc: str, labels: Sequence[str]) -> Counter:
    """A counter ``ucpgw_<name>_total`` with the given (bounded) label names."""
    return Counter(PREFIX + name, doc, tuple(labels))


def gauge(name: str, doc: str, labels: Sequence[str], mode: str = "livesum") -> Gauge:
    """A gauge; ``mode`` says how the workers' values combine in one scrape (prometheus-client's
    ``multiprocess_mode``: ``livesum`` for a per-process figure such as pool use, ``livemostrecent``
    for one read from the database by every worker)."""
    return Gauge(PREFIX + name, doc, tuple(labels), multiprocess_mode=mode)


def histogram(name: str, doc: str, labels: Sequence[str], buckets: Sequence[float] = SLO_BUCKETS) -> Histogram:
    return Histogram(PREFIX + name, doc, tuple(labels), buckets=tuple(buckets))


REQUESTS = histogram(
    "http_request_duration_seconds",
    "HTTP requests by route template, method, UCP operation, company and status class, in seconds.",
    ("route", "method", "operation", "company", "status_class"),
)
RESPONSES = counter(
    "http_responses", "HTTP responses by route template, method and status.", ("route", "method", "status")
)
ERRORS = counter("http_errors", "Protocol errors answered, by error code.", ("code",))
DB_POOL = gauge("db_pool_connections", "Database pool connections by state (in_use, idle, max).", ("state",))
DB_POOL_WAIT = histogram(
    "db_pool_acquire_seconds",
    "Time a unit of work waited for a pool connection, in seconds.",
    ("pool",),
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
)

# --- what the subsystems record (one line where it happens: metrics.NAME.labels(...).inc()) ----
#: Proof checks on a company's UCP routes by proof kind (levels.ProofKind: signature, api_key, oauth,
#: mtls, web_bot_auth, none; "other" for a refused non-signature proof) and outcome (verified,
#: anonymous, or the refusal's error code).
SIGNATURES = counter("signature_checks", "Request signature checks by proof kind and outcome.", ("proof", "outcome"))
RESPONSE_SIGNATURES = counter("response_signatures", "Signed responses: signed, or the error code.", ("outcome",))
#: UCP negotiation by the agent's protocol version (a supported version, else "other") and outcome
#: (ok, or the error code).
NEGOTIATIONS = counter("negotiations", "UCP capability negotiations by version and outcome.", ("version", "outcome"))
#: Idempotency keys: executed (first use), replayed (the stored answer), conflict (reused for other
#: arguments), in_progress (the first use still running); by door (ucp, verbs).
IDEMPOTENCY = counter("idempotency", "Idempotency-Key outcomes by door.", ("door", "outcome"))
#: Consent decisions of the verb runtime: allowed, pending (a confirmation or phrase asked), or the
#: refusal reason (nonce_used, tier_denied, ...).
CONSENT = counter("consent_decisions", "Verb runtime decisions by outcome.", ("outcome",))
#: Order webhook delivery attempts: delivered, retry (failed, tried again later), failed (given up
#: or refused target).
WEBHOOK_DELIVERIES = counter("webhook_deliveries", "Order webhook delivery attempts by result.", ("result",))
WEBHOOK_QUEUE = gauge(
    "webhook_queue_depth", "Order webhook events waiting for delivery, per company.", ("company",), "livemostrecent"
)
WEBHOOK_OLDEST = gauge(
    "webhook_oldest_undelivered_seconds",
    "Age of the oldest order webhook event not yet delivered, per company, in seconds (0: none).",
    ("company",),
    "livemostrecent",
)
WEBHOOK_DEAD = gauge(
    "webhook_dead_letters", "Order webhook events given up (dead letters), per company.", ("company",), "livemostrecent"
)
SIGNING_KEYS = gauge(
    "signing_keys",
    "Company signing keys by state (pending, active, rotating, retired, compromised).",
    ("company", "state"),
    "livemostrecent",
)

#: The request key under which a handler names its UCP operation (``create_checkout``, ...) when the
#: route alone does not say it (the MCP binding's ``tools/call``).
OPERATION = web.RequestKey("ucpgw.metrics_operation", str)
#: (method, route template) -> UCP operation, registered by the bindings at setup.
OPERATIONS: dict[tuple[str, str], str] = {}

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_CODE = re.compile(r"[a-z][a-z0-9_]{0,47}")
_companies: dict[str, str] = {}
_company_cap = 100
_children: dict[tuple, tuple[Any, Any]] = {}
#: (company_id, operation, UTC minute as epoch seconds) -> [requests, 5xx, count per SLO bucket ...,
#: count above the last]: what this process adds to request_slo_minutes at its next flush
#: (ucp_gateway.monitor). Only UCP operations of a company are kept.
SLO_PENDING: dict[tuple[Any, str, int], list[int]] = {}


def configure(max_companies: int) -> None:
    """Set how many distinct company slugs one process labels (``Settings.metrics_companies``)."""
    global _company_cap
    _company_cap = max_companies


def company_label(company: Any) -> str:
    """The company label of a request: its slug (the first ``metrics_companies`` seen), ``_other``
    beyond, ``""`` for the platform node (no company)."""
    if company is None:
        return ""
    slug = company.slug
    hit = _companies.get(slug)
    if hit is None:
        hit = _companies[slug] = slug if len(_companies) < _company_cap else "_other"
    return hit


_bounded: dict[str, dict[str, str]] = {}


def bounded(kind: str, value: str | None, cap: int = 20, pattern: re.Pattern[str] = _CODE) -> str:
    """``value`` as a label of ``kind`` (e.g. a protocol version a caller sent): itself for the first
    ``cap`` distinct values matching ``pattern``, ``other`` after them or for any other text."""
    seen = _bounded.setdefault(kind, {})
    hit = seen.get(value or "")
    if hit is None:
        ok = value is not None and pattern.fullmatch(value) is not None and len(seen) < cap
        hit = seen[value or ""] = value if ok else "other"  # type: ignore[assignment]
    return hit


VERSION_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}")


def error(code: str) -> None:
    """Count one protocol error answered with ``code`` (GatewayError.to_body)."""
    ERRORS.labels(code if _CODE.fullmatch(code) else "other").inc()


def observe_request(request: Any, route: str | None, status: int, seconds: float, company: Any = None) -> None:
    """Record one answered request (the foundation layer and the front path call this).

    ``route``: the route template (``/ucp/v1/checkout-sessions/{id}``), or None to read it from the
    request's match (``unmatched`` for 404/405). ``company``: the request's tenancy.Company or None."""
    if route is None:
        info = request.match_info
        resource = info.route.resource if info.http_exception is None else None
        route = resource.canonical if resource is not None else "unmatched"
    method = request.method
    if method not in _METHODS:
        method = "other"
    op = request.get(OPERATION) or OPERATIONS.get((method, route), "")
    slug = company_label(company)
    key = (route, method, op, slug, status)
    child = _children.get(key)
    if child is None:
        cls = f"{status // 100}xx"
        child = _children[key] = (
            REQUESTS.labels(route, method, op, slug, cls),
            RESPONSES.labels(route, method, str(status)),
        )
    child[0].observe(seconds)
    child[1].inc()
    if op and company is not None:
        minute = int(time.time()) // 60 * 60
        row = SLO_PENDING.get((company.id, op, minute))
        if row is None:
            row = SLO_PENDING[(company.id, op, minute)] = [0] * (len(SLO_BUCKETS) + 3)
        row[0] += 1
        if status >= 500:
            row[1] += 1
        row[2 + bisect_left(SLO_BUCKETS, seconds)] += 1


def take_slo_pending() -> dict[tuple[Any, str, int], list[int]]:
    """Hand over (and forget) what :func:`observe_request` counted for request_slo_minutes."""
    global SLO_PENDING
    taken, SLO_PENDING = SLO_PENDING, {}
    return taken


def render() -> tuple[bytes, str]:
    """The exposition text of this process, or of every worker's files in multiprocess mode."""
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=path)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


async def _metrics(request: web.Request) -> web.Response:
    body, ctype = render()
    return web.Response(body=body, headers={"Content-Type": ctype, "Cache-Control": "no-store"})


def metrics_app() -> web.Application:
    """The metrics listener's app: ``GET /metrics`` only (served on ``metrics_host:metrics_port``,
    apart from the company hosts)."""
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    return app


async def start_listener(host: str, port: int) -> web.AppRunner:
    """Serve :func:`metrics_app` on ``host:port``; returns the runner (``await runner.cleanup()``)."""
    runner = web.AppRunner(metrics_app(), access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def mark_process_dead(pid: int) -> None:
    """Drop a finished worker's live gauges (multiprocess mode; the supervisor calls it)."""
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        multiprocess.mark_process_dead(pid, path)


def now() -> float:
    return time.perf_counter()

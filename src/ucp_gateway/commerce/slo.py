"""The SLO view: per company and UCP operation, p50/p95 and availability against the buyer
platforms' published checkout targets, from ``request_slo_minutes`` (migration 0087; every gateway
process adds its per-minute counts there, ucp_gateway.monitor).

``ucp-gateway slo --since 1h [--company SLUG] [--json]`` and ``GET /admin/v1/slo?since=1h``
(employee, the token's company). Quantiles are interpolated inside the histogram's buckets
(``metrics.SLO_BUCKETS``, as Prometheus' ``histogram_quantile``); the targets are bucket bounds,
so "within target" is exact. Availability = 1 - 5xx answers / requests.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from ..appkeys import DATABASE
from ..clibase import common_parser, emit
from ..config import Settings
from ..db import open_database, tenant_tx
from ..errors import BadRequest
from ..keys.admin_tokens import StaffPrincipal
from ..keys.web import admin_route
from ..metrics import SLO_BUCKETS
from ..tenancy import get_company, list_companies

__all__ = ["TARGETS", "evaluate", "parse_since", "quantile", "read_slo", "register", "setup_admin"]

#: operation -> (p50 target s, p95 target s): the largest buyer platform's checkout latency targets
#: (create and update p50 <= 1 s, p95 <= 4-5 s: the stricter 4 s here; complete p50 <= 6 s, p95 <= 10 s).
TARGETS: dict[str, tuple[float, float]] = {
    "create_checkout": (1.0, 4.0),
    "update_checkout": (1.0, 4.0),
    "complete_checkout": (6.0, 10.0),
}
AVAILABILITY_TARGET = 0.95
_SINCE = re.compile(r"(\d{1,6})([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> timedelta:
    """``30m``, ``1h``, ``7d`` -> timedelta (at most 31 days: what retention keeps). Raises BadRequest."""
    m = _SINCE.fullmatch(text.strip())
    if not m or int(m.group(1)) == 0 or int(m.group(1)) * _UNIT[m.group(2)] > 31 * 86400:
        raise BadRequest("since must be a duration such as 30m, 1h or 7d (at most 31 days)")
    return timedelta(seconds=int(m.group(1)) * _UNIT[m.group(2)])


def quantile(q: float, counts: Sequence[int], bounds: Sequence[float] = SLO_BUCKETS) -> float | None:
    """The ``q`` quantile (0..1) of a histogram of per-bucket counts (``len(bounds) + 1``, the last
    above the last bound), in seconds, linearly interpolated inside its bucket; the last bound when
    it falls above it. None for an empty histogram."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i >= len(bounds):
                return bounds[-1]
            lo = bounds[i - 1] if i else 0.0
            return lo + (bounds[i] - lo) * (rank - seen) / n
        seen += n
    return bounds[-1]


def _within(counts: Sequence[int], limit: float) -> float:
    """Share of the requests answered within ``limit`` seconds (a bucket bound)."""
    total = sum(counts)
    return sum(counts[: SLO_BUCKETS.index(limit) + 1]) / total if total else 1.0


def evaluate(operation: str, requests: int, errors: int, counts: Sequence[int]) -> dict[str, Any]:
    """One operation's figures and verdicts: ``p50``/``p95`` seconds, ``availability`` (0..1),
    and, where the platforms set targets, ``p50_target``/``p95_target`` and ``meets`` (all met)."""
    p50, p95 = quantile(0.5, counts), quantile(0.95, counts)
    availability = 1 - errors / requests if requests else 1.0
    out: dict[str, Any] = {
        "operation": operation,
        "requests": requests,
        "errors": errors,
        "p50": p50,
        "p95": p95,
        "availability": availability,
        "availability_target": AVAILABILITY_TARGET,
    }
    ok = availability >= AVAILABILITY_TARGET
    target = TARGETS.get(operation)
    if target is not None:
        out["p50_target"], out["p95_target"] = target
        ok = ok and _within(counts, target[0]) >= 0.5 and _within(counts, target[1]) >= 0.95
    out["meets"] = ok
    return out


async def read_slo(conn: Any, since: datetime) -> list[dict[str, Any]]:
    """The company's operations since ``since`` (the tenant transaction's company), by operation."""
    rows = await conn.fetch(
        "SELECT operation, requests, errors, buckets FROM request_slo_minutes WHERE minute >= $1", since
    )
    sums: dict[str, list[Any]] = {}
    for r in rows:
        acc = sums.setdefault(r["operation"], [0, 0, [0] * (len(SLO_BUCKETS) + 1)])
        acc[0] += r["requests"]
        acc[1] += r["errors"]
        acc[2] = [a + b for a, b in zip(acc[2], r["buckets"], strict=True)]
    return [evaluate(op, *sums[op]) for op in sorted(sums)]


def _since(text: str | None) -> datetime:
    """The start of the window ``text`` (default 1h) ending now, on a whole minute."""
    start = datetime.now(UTC) - parse_since(text or "1h")
    return start.replace(second=0, microsecond=0)


@admin_route("employee")
async def slo_handler(request: web.Request, p: StaffPrincipal) -> Any:
    """``GET /admin/v1/slo?since=1h`` (employee): the token's company, :func:`read_slo`."""
    start = _since(request.query.get("since"))
    async with tenant_tx(request.app[DATABASE].pool, p.company_id) as conn:
        return {"since": start.isoformat(), "operations": await read_slo(conn, start)}


def setup_admin(app: web.Application) -> None:
    app.router.add_get("/admin/v1/slo", slo_handler)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def _text(report: list[dict[str, Any]], since: str) -> str:
    lines = [f"since {since}"]
    head = f"  {'operation':18} {'requests':>8} {'p50':>9} {'p95':>9} {'availability':>12}  verdict"
    for c in report:
        lines.append(f"{c['company']}")
        if not c["operations"]:
            lines.append("  no UCP operations recorded")
            continue
        lines.append(head)
        for o in c["operations"]:
            t = f" (targets {_fmt(o['p50_target'])} / {_fmt(o['p95_target'])})" if "p50_target" in o else ""
            lines.append(
                f"  {o['operation']:18} {o['requests']:>8} {_fmt(o['p50']):>9} {_fmt(o['p95']):>9}"
                f" {100 * o['availability']:>11.2f}%  {'meets' if o['meets'] else 'MISSES'}{t}"
            )
    return "\n".join(lines)


async def cmd_slo(args: argparse.Namespace, settings: Settings) -> int:
    try:
        start = _since(args.since)
    except BadRequest as exc:
        raise SystemExit(f"ucp-gateway: error: {exc.message}") from None
    report = []
    async with open_database(settings) as db:
        companies = [await get_company(db.pool, args.company)] if args.company else await list_companies(db.pool)
        for company in companies:
            async with tenant_tx(db.pool, company.id) as conn:
                report.append({"company": company.slug, "operations": await read_slo(conn, start)})
    emit(args, {"since": start.isoformat(), "companies": report}, _text(report, start.isoformat()))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``slo``."""
    p = sub.add_parser("slo", help="p50/p95 and availability per company and UCP operation", parents=[common_parser()])
    p.add_argument("--since", default="1h", help="window: 30m, 1h, 7d (default 1h)")
    p.add_argument("--company", help="one company (slug or id); default: every company")
    p.set_defaults(func=cmd_slo)

"""Manifest projections of the registry (pure): the public VerbRecord list and the progressive
disclosure of ``capability.manifest`` (INDEX -> LIST -> DETAIL).

solid-verbs spec/manifest.md: ``GET /api/v1/agent/verbs?surface=`` returns VerbRecords filtered by
surface, public, cached 5 minutes. Disclosure follows the capability.manifest pattern (digest §7):
INDEX is domain -> verb count; LIST is compact rows without schemas; DETAIL is the full record of
at most 5 named verbs. BLOCKED and admin-only verbs are never listed.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from .policy import RiskClass, tier_at_least
from .registry import Registry, Verb

__all__ = [
    "detail",
    "domain_of",
    "etag",
    "index",
    "list_rows",
    "listed",
    "manifest_bytes",
    "published",
    "summary",
]

MAX_DETAIL = 5


def domain_of(name: str) -> str:
    """``payments.refund`` -> ``payments``; ``crm_contact_update`` -> ``crm``; ``transaction`` -> itself."""
    return name.split(".", 1)[0] if "." in name else name.split("_", 1)[0]


def listed(
    registry: Registry,
    *,
    surface: str | None = None,
    shape: str | None = None,
    tier: str | None = None,
    principal_kind: str | None = None,
    subagent: str | None = None,
    tools: bool = False,
) -> list[Verb]:
    """Verbs that may be disclosed: never BLOCKED or admin-only; filtered by surface, shape, tier
    (``tier_floor`` at or below ``tier``), principal kind and sub-agent.

    The one grouping behind both the manifest (``?subagent=``) and the company profile's per
    sub-agent ``verb_count`` (``surface="ucp"``, wired in ``ucp_gateway.app``), so the two agree.

    ``tools``: the verbs a generic door projects as tools (``/ucp/mcp`` verb tools, WebMCP): leaves out
    those it would refuse to run, a verb of a binding (``VerbPolicy.reachable``, the check that
    refuses the call); the manifests keep them (a verb of its surface, run through its binding)."""
    out = []
    for v in registry:
        if v.policy.risk_class is RiskClass.BLOCKED or v.policy.admin_only:
            continue
        if tools and not v.policy.reachable():
            continue
        if surface and surface not in v.record["surfaces"]:
            continue
        if shape and v.shape != shape:
            continue
        if tier and not tier_at_least(tier, v.record["tier_floor"]):
            continue
        if principal_kind and principal_kind not in v.policy.principals:
            continue
        if subagent is not None and v.policy.subagent != subagent:
            continue
        out.append(v)
    return out


def published(verbs: Iterable[Verb]) -> list[dict[str, Any]]:
    """The VerbRecords as published (schema/verb-record.json; defaults filled)."""
    return [dict(v.record) for v in verbs]


def etag(body: bytes) -> str:
    """Strong ETag of a response body."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def summary(description: str) -> str:
    """First sentence of a description, at most 100 characters."""
    first = description.strip().split(". ", 1)[0].rstrip(".")
    return first if len(first) <= 100 else first[:97] + "..."


def index(verbs: Iterable[Verb]) -> dict[str, int]:
    """INDEX wave: domain -> verb count, sorted by domain."""
    return dict(sorted(Counter(domain_of(v.name) for v in verbs).items()))


def _row(v: Verb) -> dict[str, Any]:
    return {
        "name": v.name,
        "shape": v.shape,
        "risk_class": v.policy.risk_class.name,
        "role_floor": v.policy.effective_floor() if "buyer" not in v.policy.principals else "buyer",
        "tier_floor": v.record["tier_floor"],
        "subagent": v.policy.subagent,
        "idempotent": True,
        "summary": summary(v.record["description"]),
    }


def list_rows(
    verbs: Iterable[Verb],
    *,
    prefix: str | None = None,
    search: str | None = None,
    after: str | None = None,
    limit: int = 40,
) -> tuple[list[dict[str, Any]], str | None]:
    """LIST wave: compact rows (no schemas) for a prefix or a keyword; keyset page by name.

    Returns ``(rows, next_cursor)``; the cursor is the last name of a full page.
    """
    s = (search or "").lower()
    chosen = [
        v
        for v in verbs
        if (not prefix or v.name.startswith(prefix) or domain_of(v.name) == prefix)
        and (not s or s in v.name.lower() or s in v.record["description"].lower())
        and (after is None or v.name > after)
    ]
    page = chosen[:limit]
    return [_row(v) for v in page], (page[-1].name if len(chosen) > limit else None)


def detail(verbs: Iterable[Verb], names: Iterable[str]) -> list[dict[str, Any]]:
    """DETAIL wave: full records of the named verbs that are disclosed (unknown names dropped)."""
    want = list(dict.fromkeys(names))[:MAX_DETAIL]
    by = {v.name: v for v in verbs}
    return [dict(by[n].record) for n in want if n in by]


def manifest_bytes(records: list[dict[str, Any]]) -> bytes:
    """Canonical bytes of the public manifest (stable across processes, so the ETag is too)."""
    return json.dumps(records, sort_keys=True, separators=(",", ":")).encode()

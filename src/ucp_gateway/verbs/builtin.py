"""The runtime's own verbs: transaction, audit.revert, audit.trail, capability.manifest,
verbs.reputation and macro.run (shapes transaction, revert, trail, discovery, reputation, macro).

They are ordinary registrations: :func:`provide` registers them on a :class:`Registry`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..cursors import decode_cursor, encode_cursor
from ..errors import GatewayError
from .context import RevertContext, VerbContext
from .errors import VerbError
from .manifest import detail, index, list_rows, listed, published
from .policy import CLASS_FLOOR, ROLES, TIERS, RiskClass, VerbPolicy, role_at_least
from .registry import Registry

__all__ = ["provide", "revert_children", "steps_escalation"]

_STEP = {
    "type": "object",
    "additionalProperties": False,
    "required": ["verb"],
    "properties": {"verb": {"type": "string", "maxLength": 100}, "args": {"type": "object"}},
}


def steps_escalation(max_class: RiskClass):
    """Escalation for step-running verbs: the highest step class decides the gate; a financial
    chain's phrase is the step phrases joined with ``"; "`` (digest §8 G17)."""

    def escalate(args: Mapping[str, Any], registry: Registry | None) -> tuple[RiskClass, str | None]:
        cls, phrases = RiskClass.WRITE_REVERSIBLE, []
        for i, step in enumerate(args.get("steps", [])):
            v = registry.get(step["verb"]) if registry else None
            if v is None:
                continue  # the step's own gates answer unknown_verb / blocked_verb at execution
            scls = v.policy.risk_class
            if scls is RiskClass.BLOCKED:
                raise VerbError("blocked_verb", f"step {i} calls a blocked verb", path=f"$.steps[{i}].verb")
            if scls > max_class or v.shape in ("transaction", "macro", "revert"):
                raise VerbError(
                    "step_class_not_allowed",
                    f"step {i} ({v.name}, {scls.name}) is not allowed here",
                    path=f"$.steps[{i}].verb",
                )
            cls = max(cls, scls)
            problems = v.check_args(step.get("args", {}))
            if problems:
                sub = problems[0].path[1:]
                raise VerbError("invalid_arguments", problems[0].message, path=f"$.steps[{i}].args{sub}")
            if v.policy.phrase is not None:
                phrases.append(v.policy.phrase(step.get("args", {})))
        return cls, ("; ".join(phrases) if cls >= RiskClass.WRITE_FINANCIAL else None)

    return escalate


async def _run_steps(ctx: VerbContext, steps: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    ctx.transaction_id = ctx.transaction_id or "tx_" + secrets.token_hex(6)
    done: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        try:
            r = await ctx.run_child(step["verb"], step.get("args", {}))
        except VerbError as exc:
            rows = [{"verb": d["verb"], "status": "rolled_back"} for d in done]
            rows.append({"verb": step["verb"], "status": "failed", "reason": exc.reason})
            raise VerbError(
                exc.reason,
                f"step {i} ({step['verb']}) failed: {exc.message}; nothing was committed",
                hint=exc.hint,
                path=f"$.steps[{i}]" + (exc.path or "")[1:],
                result={"transaction_id": ctx.transaction_id, "status": "aborted", "steps": rows},
            ) from None
        done.append({"verb": r["verb"], "status": r["status"], "audit_id": r["audit_id"]})
    ctx.set_revert(f"tx:{ctx.transaction_id}:rollback_all", {"transaction_id": ctx.transaction_id})
    return done


async def _transaction(ctx: VerbContext) -> dict[str, Any]:
    steps = await _run_steps(ctx, list(ctx.args["steps"]))
    return {"transaction_id": ctx.transaction_id, "status": "committed", "steps": steps}


async def revert_children(rctx: RevertContext) -> dict[str, Any]:
    """Revert a transaction or macro: its children in reverse order, all or nothing."""
    for child_id in reversed(rctx.entry.get("children") or []):
        row = await rctx.conn.fetchrow("SELECT entry FROM verb_audit_log WHERE audit_id = $1", child_id)
        if row is None or row["entry"].get("risk_class") == "READ":
            continue
        await _revert_one(rctx, child_id, row["entry"])
    return {"revert_action": f"reverted {len(rctx.entry.get('children') or [])} steps in reverse order"}


async def _revert_one(rctx: RevertContext, audit_id: int, entry: Mapping[str, Any]) -> dict[str, Any]:
    reg = rctx.dispatcher.registry
    target = reg.get(entry["verb"])
    refusal = {"reverted": False, "audit_id": audit_id, "original_action": entry["verb"]}
    if target is None or target.policy.revert is None or not entry.get("reversible", False):
        raise VerbError(
            "no_revert_handler",
            f"{entry['verb']} has no revert handler; manual intervention required",
            result={**refusal, "reason": "no_revert_handler"},
        )
    floor = max(
        target.policy.effective_floor(),
        CLASS_FLOOR.get(RiskClass[entry["risk_class"]], "owner"),
        key=ROLES.index,
    )
    if not role_at_least(rctx.principal.role, floor):
        raise VerbError("role_denied", f"reverting {entry['verb']} needs role {floor}")
    claimed = await rctx.conn.fetchval(
        "INSERT INTO verb_reversals (company_id, audit_id, reverted_at, reverted_by) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT DO NOTHING RETURNING true",
        rctx.company.id,
        audit_id,
        rctx.now,
        rctx.principal.key,
    )
    if not claimed:
        raise VerbError("already_reverted", result={**refusal, "reason": "already_reverted"})
    child = RevertContext(rctx.conn, rctx.principal, rctx.company, rctx.now, entry, audit_id, rctx.dispatcher)
    return await target.policy.revert(child)


async def _audit_revert(ctx: VerbContext) -> dict[str, Any]:
    aid = int(ctx.args["audit_id"])
    ctx.set_entity("audit", aid)
    row = await ctx.conn.fetchrow("SELECT entry, decision FROM verb_audit_log WHERE audit_id = $1", aid)
    refusal = {"reverted": False, "audit_id": aid}
    if row is None:
        raise VerbError("audit_not_found", f"no audit row {aid}", result={**refusal, "reason": "audit_not_found"})
    entry = row["entry"]
    if row["decision"] != "allowed" or entry.get("risk_class") in (None, "READ") or entry["verb"] == "audit.revert":
        raise VerbError(
            "not_revertible",
            "only completed writes can be reverted",
            result={**refusal, "reason": "not_revertible"},
        )
    if entry.get("transaction_id") and not entry.get("children"):
        raise VerbError(
            "not_revertible",
            "this action is a step; revert its transaction or macro",
            result={**refusal, "reason": "not_revertible"},
        )
    rctx = RevertContext(ctx.conn, ctx.principal, ctx.company, ctx.now, entry, aid, ctx.dispatcher)
    out = await _revert_one(rctx, aid, entry)
    await ctx.emit("audit.reverted", "audit", aid, {"verb": entry["verb"]})
    return {
        "reverted": True,
        "audit_id": aid,
        "original_action": entry["verb"],
        "revert_action": out["revert_action"],
    }


def _instant(args: dict[str, Any], name: str) -> datetime | None:
    """``args[name]`` as an aware datetime (RFC 3339 date-time: an offset or ``Z`` is required), or
    None when absent. Raises VerbError(invalid_arguments) naming the argument."""
    raw = args.get(name)
    if not raw:
        return None
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
        if when.tzinfo is None:
            raise ValueError("no offset")
        when.astimezone(UTC)  # a year-1 instant east of UTC has no UTC value
    except (ValueError, OverflowError, TypeError):
        raise VerbError(
            "invalid_arguments", f"{name} must be an RFC 3339 date-time with an offset", path=f"$.{name}"
        ) from None
    return when


async def _trail(ctx: VerbContext) -> dict[str, Any]:
    from .audit import trail

    a = ctx.args
    since, until = _instant(a, "since"), _instant(a, "until")
    before = int(a["cursor"][2:]) if a.get("cursor") else None
    entries, nxt = await trail(
        ctx.conn,
        verb=a.get("verb"),
        decision=a.get("decision"),
        since=since,
        until=until,
        before=before,
        limit=int(a.get("limit", 50)),
    )
    return {"entries": entries, "next_cursor": f"a_{nxt}" if nxt else None}


async def _manifest(ctx: VerbContext) -> dict[str, Any]:
    a = ctx.args
    tier = a.get("tier") or ctx.company.tier
    verbs = listed(
        ctx.dispatcher.registry, surface=ctx.principal.transport, tier=tier, principal_kind=ctx.principal.kind
    )
    try:  # opaque and strict, like the agent graph's: junk is refused, never read as a verb name
        after = decode_cursor(a["cursor"], max_length=64) if a.get("cursor") else None
    except GatewayError:
        raise VerbError("invalid_cursor", "cursor is not one a previous page returned", path="cursor") from None
    mode = a.get("mode") or (
        "detail" if a.get("verbs") else "list" if (a.get("prefix") or a.get("search") or after) else "index"
    )
    out: dict[str, Any] = {
        "mode": mode,
        "surface": ctx.principal.transport,
        "tier": tier,
        "verbs": [],
        "total": len(verbs),
    }
    if mode == "index":
        out["index"] = index(verbs)
    elif mode == "list" and not a.get("detail"):
        out["rows"], last = list_rows(
            verbs,
            prefix=a.get("prefix"),
            search=a.get("search"),
            after=after,
            limit=int(a.get("limit", 40)),
        )
        out["next_cursor"] = encode_cursor(last) if last is not None else None
    else:
        names = a.get("verbs") or [
            r["name"] for r in list_rows(verbs, prefix=a.get("prefix"), search=a.get("search"))[0]
        ]
        out["verbs"] = published_detail = detail(verbs, names)
        out["total"] = len(published_detail)
    return out


async def _reputation(ctx: VerbContext) -> dict[str, Any]:
    days = int(ctx.args.get("window_days", 7))
    rows = await ctx.conn.fetch(
        "SELECT l.verb, count(*) AS invocations, "
        " count(*) FILTER (WHERE l.decision = 'allowed') AS completed, "
        " count(*) FILTER (WHERE l.decision = 'failed') AS failed, "
        " count(*) FILTER (WHERE l.decision = 'denied') AS denied, "
        " count(r.audit_id) AS reverted, "
        " percentile_cont(0.5) WITHIN GROUP (ORDER BY (l.entry->>'elapsed_us')::bigint) "
        "   FILTER (WHERE l.decision = 'allowed') AS p50_us, "
        " percentile_cont(0.95) WITHIN GROUP (ORDER BY (l.entry->>'elapsed_us')::bigint) "
        "   FILTER (WHERE l.decision = 'allowed') AS p95_us "
        "FROM verb_audit_log l LEFT JOIN verb_reversals r ON r.audit_id = l.audit_id "
        "WHERE l.created_at > $1::timestamptz - make_interval(days => $2) AND ($3::text IS NULL OR l.verb = $3) "
        " AND l.decision <> 'pending' AND l.decision <> 'replayed' "
        "GROUP BY l.verb ORDER BY l.verb",
        ctx.now,
        days,
        ctx.args.get("verb"),
    )
    scores = []
    for r in rows:
        ran = r["completed"] + r["failed"]
        success = r["completed"] / ran if ran else None
        revert_rate = r["reverted"] / r["completed"] if r["completed"] else 0.0
        stars = None if success is None else round(5 * success * (1 - revert_rate) * 2) / 2
        scores.append(
            {
                "verb": r["verb"],
                "invocations": r["invocations"],
                "success_rate": success,
                "denial_rate": r["denied"] / r["invocations"],
                "revert_rate": revert_rate,
                "p50_ms": None if r["p50_us"] is None else round(r["p50_us"] / 1000, 3),
                "p95_ms": None if r["p95_us"] is None else round(r["p95_us"] / 1000, 3),
                "star_rating": stars,
            }
        )
    return {"scores": scores, "window_days": days}


async def _macro_run(ctx: VerbContext) -> dict[str, Any]:
    row = await ctx.conn.fetchrow("SELECT id, steps FROM macros WHERE id = $1", ctx.args["macro_id"])
    if row is None:
        raise VerbError("not_found", f"no macro {ctx.args['macro_id']!r}", path="$.macro_id")
    overrides = ctx.args.get("override_args") or {}
    steps = [
        {"verb": s["verb"], "args": {**s.get("args", {}), **overrides.get(str(i), {})}}
        for i, s in enumerate(row["steps"])
    ]
    for i, s in enumerate(steps):
        v = ctx.dispatcher.registry.get(s["verb"])
        if v is not None and v.policy.risk_class > RiskClass.WRITE_REVERSIBLE:
            raise VerbError("step_class_not_allowed", f"macro step {i} ({s['verb']}) needs its own consent")
    ctx.set_entity("macro", row["id"])
    done = await _run_steps(ctx, steps)
    ctx.set_revert(f"macro:{row['id']}:{ctx.transaction_id}:rollback_all", {"macro_id": row["id"]})
    return {"macro_id": row["id"], "status": "completed", "steps": done}


def provide(registry: Registry) -> None:
    """Register the runtime's own verbs on ``registry``."""
    r = registry.register
    r(
        {
            "name": "transaction",
            "shape": "transaction",
            "side_effects": "write",
            "description": "Run 1-10 write steps ({verb, args}) in one database transaction: all commit or none. "
            "The receipt lists each step's receipt; audit.revert of the parent reverts the steps "
            "in reverse order. The highest step class decides the consent gate.",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["steps"],
                "properties": {"steps": {"type": "array", "minItems": 1, "maxItems": 10, "items": _STEP}},
            },
            "surfaces": ["http", "mcp_stdio", "webmcp", "cli"],
        },
        VerbPolicy(
            RiskClass.WRITE_REVERSIBLE,
            subagent="ops",
            revert=revert_children,
            escalate=steps_escalation(RiskClass.WRITE_FINANCIAL),
        ),
        _transaction,
    )
    r(
        {
            "name": "audit.revert",
            "shape": "revert",
            "side_effects": "write",
            "description": "Undo one completed write by its audit_id through the verb's revert handler. Answers "
            "reverted:false with reason no_revert_handler, already_reverted or not_revertible.",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["audit_id"],
                "properties": {"audit_id": {"type": "integer", "minimum": 1}},
            },
            "surfaces": ["http", "mcp_stdio", "webmcp", "cli"],
        },
        VerbPolicy(RiskClass.WRITE_REVERSIBLE, subagent="compliance"),
        _audit_revert,
    )
    r(
        {
            "name": "audit.trail",
            "shape": "trail",
            "description": "Query the audit log newest first: who called which verb, the decision and reason. "
            "Filter by verb, decision and time; page with cursor.",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "verb": {"type": "string"},
                    "decision": {"enum": ["allowed", "denied", "pending", "failed", "replayed"]},
                    "since": {"type": "string", "format": "date-time"},
                    "until": {"type": "string", "format": "date-time"},
                    "cursor": {"type": "string", "pattern": "^a_[0-9]{1,18}$"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                },
            },
            "surfaces": ["http", "mcp_stdio", "webmcp", "cli"],
        },
        VerbPolicy(RiskClass.READ, role_floor="admin", subagent="compliance"),
        _trail,
    )
    r(
        {
            "name": "capability.manifest",
            "shape": "discovery",
            "description": "Discover verbs in waves: INDEX (default: domain -> verb count), LIST (prefix or search: "
            "compact rows, no schemas), DETAIL (verbs: full contracts of up to 5 verbs).",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "mode": {"enum": ["index", "list", "detail"]},
                    "prefix": {"type": "string", "maxLength": 64},
                    "search": {"type": "string", "maxLength": 64},
                    "detail": {"type": "boolean"},
                    "verbs": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
                    "tier": {"enum": list(TIERS)},
                    "cursor": {"type": "string", "maxLength": 256},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 40},
                },
            },
        },
        VerbPolicy(RiskClass.READ, subagent="ops", principals=frozenset({"staff", "agent", "buyer"})),
        _manifest,
    )
    r(
        {
            "name": "verbs.reputation",
            "shape": "reputation",
            "description": "Reliability per verb from the audit log: invocations, success, denial and revert rates, "
            "p50/p95 latency and a 0-5 star rating over a window (default 7 days).",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "verb": {"type": "string"},
                    "window_days": {"type": "integer", "minimum": 1, "maximum": 90},
                },
            },
        },
        VerbPolicy(RiskClass.READ, subagent="ops"),
        _reputation,
    )
    r(
        {
            "name": "macro.run",
            "shape": "macro",
            "side_effects": "write",
            "description": "Replay a saved chain of reversible writes (a macro) in one transaction; override_args maps "
            "a step index to argument overrides. Returns each step's receipt.",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["macro_id"],
                "properties": {
                    "macro_id": {"type": "string", "maxLength": 64},
                    "override_args": {"type": "object", "additionalProperties": {"type": "object"}},
                },
            },
            "surfaces": ["http", "mcp_stdio", "webmcp", "cli"],
        },
        VerbPolicy(RiskClass.WRITE_REVERSIBLE, subagent="marketing", revert=revert_children),
        _macro_run,
    )
    _ = published  # the discovery output reuses the published record form

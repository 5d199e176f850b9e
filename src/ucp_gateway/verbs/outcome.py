"""What a verb call leaves behind, built without I/O: its audit entry and its success envelope.

The dispatcher (:mod:`.dispatcher`, the imperative shell) decides, executes and persists; these pure
functions shape the records. ``audit_entry`` is the canonical record that the hash chain covers
(:mod:`.audit`); ``success_envelope`` is solid-verbs ``schema/envelope.json`` with the receipt of a
write (``audit_id``, ``idempotency_key``, ``rollback_handle``, ``timestamp``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .audit import iso, plain_audit_args, redact, safe_name
from .consent import args_digest, canonical_json
from .decide import Call, Decision
from .policy import Principal, RiskClass

__all__ = ["ARGS_MAX", "audit_entry", "success_envelope"]

#: Characters of an audit entry's ``args`` text at most (the digest covers the whole arguments).
ARGS_MAX = 4000

_CLASS_NAME = {c: c.name for c in RiskClass}  # Enum.name is a descriptor call: once per class
_ID_LAST: tuple[Any, str] = (None, "")


def _id_text(company_id: Any) -> str:
    """``str(company_id)``, remembered for the last id object (one company's dispatches repeat it;
    identity, and the pair holds the object, so a recycled address cannot match)."""
    global _ID_LAST
    last = _ID_LAST
    if company_id is last[0]:
        return last[1]
    text = str(company_id)
    _ID_LAST = (company_id, text)
    return text


def _safe_digest(args: Any) -> str | None:
    try:
        return args_digest(args) if isinstance(args, Mapping) else None
    except (TypeError, ValueError):
        return None


def audit_entry(
    principal: Principal,
    company: Any,
    call: Call,
    verb: Any,
    decision: Decision,
    outcome: str,
    status: str,
    now: datetime,
) -> dict[str, Any]:
    """The audit entry of one exit of a call (solid-verbs audit log; every exit writes one).

    Args: ``company``: the tenancy ``Company`` (its ``id``); ``verb``: the registry ``Verb`` or None
    (an unknown name, recorded safely); ``decision``: what :func:`.decide.decide` returned, or the
    failure made of it; ``outcome`` / ``status``: ``allowed`` / ``completed``, ``denied``,
    ``pending``, ``replayed``, ``failed``; ``now``: aware UTC time (written RFC 3339).
    Returns: ``{v, company_id, at, verb, decision, status, principal, transport, risk_class,
    args_digest, reason?, approval?, args?}``. ``args`` is the canonical JSON of the redacted
    arguments (at most :data:`ARGS_MAX` characters), left out for verbs whose policy keeps their
    arguments out of the log (``audit_args=False``: a UCP body may carry a payment credential);
    an approval never records the typed phrase.
    """
    e: dict[str, Any] = {
        "v": 1,
        "company_id": _id_text(company.id),
        "at": iso(now),
        "verb": verb.name if verb else safe_name(call.verb),
        "decision": outcome,
        "status": status,
        "principal": {"kind": principal.kind, "subject": principal.subject, "role": principal.role},
        "transport": principal.transport,
        "risk_class": _CLASS_NAME[decision.risk_class] if decision.risk_class is not None else None,
        "args_digest": decision.digest or _safe_digest(call.args),
    }
    if decision.reason:
        e["reason"] = decision.reason
    if decision.approval:
        e["approval"] = {k: v for k, v in decision.approval.items() if k != "phrase"} | {"approved_at": iso(now)}
    args = call.args
    if (type(args) is dict or isinstance(args, Mapping)) and (verb is None or verb.policy.audit_args):
        aj = decision.args_json  # canonical JSON of the cleaned args (the digest's input)
        if aj is not None and type(args) is dict and plain_audit_args(args):
            e["args"] = aj.decode()[:ARGS_MAX]  # = canonical_json(redact(args)): nothing to clean or redact
        else:
            try:
                e["args"] = canonical_json(redact(args))[:ARGS_MAX]
            except (TypeError, ValueError):
                e["args"] = None
    return e


def success_envelope(
    verb: Any, result: dict[str, Any], audit_id: int, key: str | None, entry: Mapping[str, Any], now: datetime
) -> dict[str, Any]:
    """The envelope of a completed call (solid-verbs ``schema/envelope.json``).

    Args: ``verb``: the registry ``Verb``; ``result``: the handler's result; ``audit_id``: the
    audit row's id (0 until it is known); ``key``: the idempotency key of a write, None for a read;
    ``entry``: its audit entry (for ``rollback_handle``); ``now``: aware UTC time.
    Returns: ``{ok: true, verb, audit_id, result, idempotency_key?, rollback_handle?}``; a write's
    result is its receipt (``status``, ``audit_id``, ``idempotency_key``, ``timestamp``,
    ``rollback_handle?``) with the handler's fields over it, and ``audit_id`` this row's, except a
    revert's, which names the reverted action (``revert.json``).
    """
    env: dict[str, Any] = {"ok": True, "verb": verb.name, "audit_id": audit_id}
    if key is not None:
        handle = entry.get("rollback_handle")
        # the receipt's fields first, then the handler's (which win), as {**receipt, **result}
        receipt = {"status": "completed", "audit_id": audit_id, "idempotency_key": key, "timestamp": iso(now)}
        if handle:
            receipt["rollback_handle"] = handle
        receipt.update(result)
        result = receipt
        if verb.shape != "revert":
            result["audit_id"] = audit_id
        env["idempotency_key"] = key
        if handle:
            env["rollback_handle"] = handle
    env["result"] = result
    return env

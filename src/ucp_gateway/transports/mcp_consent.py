"""Consent asked inside an MCP tool call (pure): what to ask, in which elicitation mode, and what an
answer means.

A tool call that needs the person's confirmation gets an :class:`Ask`: a ``complete_checkout`` that
escalated (``requires_escalation`` with a code the confirmation page resolves, commerce.confirm), or
a verb tool whose dispatch is pending a click or a typed phrase. MCP elicitation (2025-06-18 form
mode; 2025-11-25 adds url mode; 2026-07-28 carries it as an ``input_required`` round trip) lets
the agent's UI show it to the person:

- ``amount_limit_exceeded`` (an identified agent above its amount limit): form (``agree: true``),
  else url (``accept`` once the person confirmed on the ``continue_url`` page);
- ``buyer_handoff_required`` (an agent whose level may not place orders): url only, the person
  confirms or pays on the page (the agent's own answer proves nothing);
- a verb pending ``click``: form, ``confirm: true``;
- a verb pending ``typed_phrase``: form, ``typed_phrase``, checked by the dispatcher against the
  HMAC nonce it issued (single use, ``verbs_nonce_ttl``: five minutes by default).

Human-only verbs (``confirm: human``) are never asked here: a person confirms them on the approval
page. A client that declared no elicitation mode the ask allows gets the ask's ``fallback``: the
escalation with its ``continue_url``, or the pending envelope. Form mode asks for nothing sensitive
(MCP elicitation: no secrets in form mode); payment stays on the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..commerce.confirm import body_digest, escalations
from ..htmlpage import format_money

__all__ = [
    "ELICITING_VERSIONS",
    "Ask",
    "accepted",
    "checkout_ask",
    "declared_modes",
    "elicitation_params",
    "pick_mode",
    "verb_ask",
]

#: revision -> the elicitation modes it knows (url mode came with 2025-11-25)
ELICITING_VERSIONS: Mapping[str, frozenset[str]] = {
    "2025-06-18": frozenset({"form"}),
    "2025-11-25": frozenset({"form", "url"}),
    "2026-07-28": frozenset({"form", "url"}),
}
_AMOUNT, _HANDOFF = "amount_limit_exceeded", "buyer_handoff_required"


@dataclass(frozen=True, slots=True)
class Ask:
    """One question for the person. ``kind``: ``checkout`` or ``verb``; ``modes`` the elicitation
    modes it may use, preferred first; ``schema`` the form's ``requestedSchema``; ``url`` the page
    of url mode; ``state`` what resuming the call needs (JSON); ``fallback`` the tool result to
    answer when nobody is asked or the person says no."""

    kind: str
    modes: tuple[str, ...]
    message: str
    schema: dict[str, Any] | None
    url: str | None
    state: dict[str, Any]
    fallback: Mapping[str, Any]


def declared_modes(capabilities: Any, version: str) -> frozenset[str]:
    """The elicitation modes a client declared (``capabilities.elicitation``; ``{}`` means form,
    MCP 2025-11-25 client/elicitation), limited to what ``version`` knows."""
    known = ELICITING_VERSIONS.get(version, frozenset())
    el = capabilities.get("elicitation") if isinstance(capabilities, Mapping) else None
    if not isinstance(el, Mapping) or not known:
        return frozenset()
    modes = {m for m in ("form", "url") if isinstance(el.get(m), Mapping)} or {"form"}
    return frozenset(modes) & known


def pick_mode(ask: Ask, declared: frozenset[str]) -> str | None:
    return next((m for m in ask.modes if m in declared), None)


def _money(body: Mapping[str, Any]) -> str:
    total = next((t["amount"] for t in body.get("totals") or [] if t.get("type") == "total"), 0)
    return format_money(total, str(body.get("currency") or "USD"))


def checkout_ask(payload: Mapping[str, Any], arguments: Mapping[str, Any], merchant: str) -> Ask | None:
    """The ask of a ``complete_checkout`` answer that escalated for the buyer's confirmation, else None."""
    if payload.get("status") != "requires_escalation" or not isinstance(payload.get("id"), str):
        return None
    codes = sorted({m["code"] for m in escalations(payload) if m["action"] == "confirm"})
    if not codes or len(codes) != len(escalations(payload)):  # something else needs the agent first
        return None
    url = payload.get("continue_url") if isinstance(payload.get("continue_url"), str) else None
    modes = ("url",) if _HANDOFF in codes else ("form", "url")
    modes = tuple(m for m in modes if m != "url" or url)
    if not modes:
        return None
    items = ", ".join(f"{li['quantity']} x {li['item'].get('title') or li['item']['id']}"
                      for li in payload.get("line_items") or [])  # fmt: skip
    what = f"{items} for {_money(payload)} at {merchant}"
    if _HANDOFF in codes:
        message = f"Finish your order on the shop's page: {what}."
    else:
        message = f"Confirm your order: {what}. It is above what your agent may spend without you."
    schema = {
        "type": "object",
        "properties": {
            "agree": {"type": "boolean", "title": "I have reviewed this order and agree", "description": what}
        },
        "required": ["agree"],
    }
    meta = arguments.get("meta") if isinstance(arguments.get("meta"), Mapping) else {}
    state = {"checkout_id": payload["id"], "digest": body_digest(payload), "codes": codes,
             "key": meta.get("idempotency-key")}  # fmt: skip
    return Ask("checkout", modes, message, schema, url, state, payload)


def verb_ask(envelope: Mapping[str, Any], verb: str, idempotency_key: str | None) -> Ask | None:
    """The ask of a verb dispatch pending a click or a typed phrase, else None (human-only: None)."""
    pending = envelope.get("pending")
    error = envelope.get("error") or {}
    if envelope.get("ok") is not False or error.get("reason") != "dispatch_pending" or not isinstance(pending, dict):
        return None
    state: dict[str, Any] = {"verb": verb, "key": idempotency_key, "confirm": pending.get("confirm")}
    if pending.get("confirm") == "click":
        field = {"confirm": {"type": "boolean", "title": f"Run {verb}"}}
        message = f"Allow your agent to run {verb}?"
    elif pending.get("confirm") == "typed_phrase" and isinstance(pending.get("nonce"), str):
        phrase = str(pending.get("required_phrase", ""))
        field = {"typed_phrase": {"type": "string", "title": f'Type "{phrase}" to confirm', "maxLength": 500}}
        message = f'Your agent asks to run {verb}. To allow it, type exactly: "{phrase}"'
        state["nonce"] = pending["nonce"]
    else:
        return None
    schema = {"type": "object", "properties": field, "required": list(field)}
    return Ask("verb", ("form",), message, schema, None, state, envelope)


def elicitation_params(ask: Ask, mode: str, elicitation_id: str | None) -> dict[str, Any]:
    """The ``elicitation/create`` params (MCP client/elicitation); ``elicitation_id`` on url mode of
    the handshake revisions (2025-11-25 requires it, 2026-07-28 dropped it)."""
    if mode == "url":
        out: dict[str, Any] = {"mode": "url", "message": ask.message, "url": ask.url}
        if elicitation_id is not None:
            out["elicitationId"] = elicitation_id
        return out
    return {"mode": "form", "message": ask.message, "requestedSchema": ask.schema}


def accepted(ask_kind: str, state: Mapping[str, Any], mode: str, answer: Any) -> dict[str, Any] | None:
    """The content of an answer that says yes (``{}`` for url mode), or None: declined, cancelled,
    or not what the form asked (a wrong answer is a no, never a partial yes)."""
    if not isinstance(answer, Mapping) or answer.get("action") != "accept":
        return None
    if mode == "url":
        return {}
    content = answer.get("content")
    if not isinstance(content, Mapping):
        return None
    if ask_kind == "checkout":
        return {"agree": True} if content.get("agree") is True else None
    if state.get("confirm") == "click":
        return {"confirm": True} if content.get("confirm") is True else None
    phrase = content.get("typed_phrase")
    return {"typed_phrase": phrase} if isinstance(phrase, str) and len(phrase) <= 500 else None

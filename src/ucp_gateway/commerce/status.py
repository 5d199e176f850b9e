"""The checkout status machine as one transition table (UCP checkout.md, "Checkout Status Lifecycle").

Events are what the business observes; :func:`transition` returns the next status or raises
:class:`InvalidTransition` (the REST binding maps it to 409 with a UCP error envelope).
"""

from __future__ import annotations

from typing import Final

from ..errors import Conflict

__all__ = [
    "NON_TERMINAL",
    "STATUSES",
    "TERMINAL",
    "TRANSITIONS",
    "InvalidTransition",
    "can",
    "status_for_messages",
    "transition",
]

STATUSES: Final = (
    "incomplete",
    "requires_escalation",
    "ready_for_complete",
    "complete_in_progress",
    "completed",
    "canceled",
)
TERMINAL: Final = frozenset({"completed", "canceled"})
NON_TERMINAL: Final = frozenset(STATUSES) - TERMINAL

# event -> {from_status: to_status}. "recompute:<s>" events carry the status the pure checkout
# computation derived from its messages (incomplete / requires_escalation / ready_for_complete).
_RECOMPUTABLE: Final = ("incomplete", "requires_escalation", "ready_for_complete")
TRANSITIONS: Final[dict[str, dict[str, str]]] = {
    **{f"recompute:{target}": {src: target for src in _RECOMPUTABLE} for target in _RECOMPUTABLE},
    "complete_started": {"ready_for_complete": "complete_in_progress"},
    "complete_succeeded": {"complete_in_progress": "completed", "requires_escalation": "completed"},
    # a recoverable failure during complete (payment declined, stock gone) returns to incomplete
    "complete_failed": {"complete_in_progress": "incomplete"},
    "cancel": {s: "canceled" for s in (*_RECOMPUTABLE, "complete_in_progress")},
    "expire": {s: "canceled" for s in (*_RECOMPUTABLE, "complete_in_progress")},
}


class InvalidTransition(Conflict):
    """The operation is not allowed in the checkout's current status (HTTP 409)."""

    code = "checkout_not_modifiable"


def can(status: str, event: str) -> bool:
    """True when ``event`` is allowed from ``status``."""
    return status in TRANSITIONS.get(event, {})


def transition(status: str, event: str) -> str:
    """Next status for ``event`` from ``status``.

    Raises:
        InvalidTransition: the event is not allowed from that status (e.g. update of a completed
            checkout; completed is immutable and canceled is terminal).
        KeyError: unknown event name (a programming error).
    """
    table = TRANSITIONS[event]
    try:
        return table[status]
    except KeyError:
        raise InvalidTransition(
            f"checkout is {status}; '{event.split(':')[0]}' is not allowed",
        ) from None


def status_for_messages(messages: list[dict]) -> str:
    """The status a (non-terminal) checkout has given its messages (UCP checkout.md).

    Any error with a ``requires_buyer_input``/``requires_buyer_review`` severity ->
    ``requires_escalation``; any other error -> ``incomplete``; else ``ready_for_complete``.
    """
    errors = [m for m in messages if m.get("type") == "error"]
    if any(m.get("severity", "").startswith("requires_") for m in errors):
        return "requires_escalation"
    if errors:
        return "incomplete"
    return "ready_for_complete"

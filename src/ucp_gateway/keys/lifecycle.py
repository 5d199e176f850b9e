"""Company signing-key lifecycle as one transition table (pure; like h11's ``_state.py``).

::

    pending --activate--> active --rotate_out--> rotating --retire--> retired
       |                    |                       |                    |
       +--retire (cancel)   +----------+------------+--------------------+
                                       v compromise
                                  compromised (terminal)

- pending: published, never signs; active: signs, exactly one per company;
- rotating: published, verify-only, for a grace period (>= 7 days); retired: unpublished, kept for
  audit; compromised: unpublished at once, never used again (UCP signatures.md "Key Rotation").
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum

from ..errors import Conflict

__all__ = [
    "PUBLISHED",
    "TRANSITIONS",
    "IllegalTransition",
    "KeyEvent",
    "KeyState",
    "KeyTiming",
    "due_events",
    "step",
]


class KeyState(StrEnum):
    PENDING = "pending"
    ACTIVE = "active"
    ROTATING = "rotating"
    RETIRED = "retired"
    COMPROMISED = "compromised"


class KeyEvent(StrEnum):
    ACTIVATE = "activate"
    ROTATE_OUT = "rotate_out"
    RETIRE = "retire"
    COMPROMISE = "compromise"


TRANSITIONS: dict[KeyState, dict[KeyEvent, KeyState]] = {
    KeyState.PENDING: {
        KeyEvent.ACTIVATE: KeyState.ACTIVE,
        KeyEvent.RETIRE: KeyState.RETIRED,
        KeyEvent.COMPROMISE: KeyState.COMPROMISED,
    },
    KeyState.ACTIVE: {KeyEvent.ROTATE_OUT: KeyState.ROTATING, KeyEvent.COMPROMISE: KeyState.COMPROMISED},
    KeyState.ROTATING: {KeyEvent.RETIRE: KeyState.RETIRED, KeyEvent.COMPROMISE: KeyState.COMPROMISED},
    KeyState.RETIRED: {KeyEvent.COMPROMISE: KeyState.COMPROMISED},
    KeyState.COMPROMISED: {},
}

#: States whose public JWK appears in the discovery profile.
PUBLISHED = frozenset({KeyState.PENDING, KeyState.ACTIVE, KeyState.ROTATING})


class IllegalTransition(Conflict):
    code = "illegal_key_transition"


def step(state: KeyState | str, event: KeyEvent | str) -> KeyState:
    """The state after ``event``; raises IllegalTransition (409) if the table has no such edge."""
    st, ev = KeyState(state), KeyEvent(event)
    nxt = TRANSITIONS[st].get(ev)
    if nxt is None:
        raise IllegalTransition(f"a {st.value} key cannot {ev.value}")
    return nxt


@dataclass(frozen=True, slots=True)
class KeyTiming:
    """What the scheduler needs to know about one key. Times are aware UTC datetimes."""

    kid: str
    state: KeyState
    state_changed_at: dt.datetime
    activate_at: dt.datetime | None = None  # a scheduled activation (pending keys), else None

    def activation_due(self, publish_min: int) -> dt.datetime:
        """When a pending key activates: ``publish_min`` after it was published, or at its
        scheduled ``activate_at`` when that is later."""
        due = self.state_changed_at + dt.timedelta(seconds=publish_min)
        return max(due, self.activate_at) if self.activate_at is not None else due


def due_events(
    keys: list[KeyTiming], now: dt.datetime, *, publish_min: int, rotating_grace: int
) -> list[tuple[str, KeyEvent]]:
    """Time-driven transitions that are due (pure).

    - the pending key due first (published for >= ``publish_min`` seconds, the profile cache
      max-age, and past its scheduled ``activate_at`` if it has one; oldest first) is activated;
      the repository moves the current active key to rotating in the same step;
    - a rotating key older than ``rotating_grace`` seconds (>= 7 days) is retired.
    """
    out: list[tuple[str, KeyEvent]] = []
    pending = sorted(
        (k.activation_due(publish_min), k.state_changed_at, k.kid) for k in keys if k.state is KeyState.PENDING
    )
    if pending and pending[0][0] <= now:
        out.append((pending[0][2], KeyEvent.ACTIVATE))
    for k in keys:
        if k.state is KeyState.ROTATING and (now - k.state_changed_at).total_seconds() >= rotating_grace:
            out.append((k.kid, KeyEvent.RETIRE))
    return out

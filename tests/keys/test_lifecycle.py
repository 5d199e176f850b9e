"""The key lifecycle table (pure): every edge, every refused edge, time-driven events."""

from __future__ import annotations

import datetime as dt

import pytest

from ucp_gateway.keys.lifecycle import (
    PUBLISHED,
    TRANSITIONS,
    IllegalTransition,
    KeyEvent,
    KeyState,
    KeyTiming,
    due_events,
    step,
)

NOW = dt.datetime(2026, 4, 8, 12, 0, tzinfo=dt.UTC)


def test_walk_whole_table():
    for state in KeyState:
        for event in KeyEvent:
            if event in TRANSITIONS[state]:
                assert step(state, event) is TRANSITIONS[state][event]
            else:
                with pytest.raises(IllegalTransition) as e:
                    step(state, event)
                assert e.value.http_status == 409


def test_key_rules():
    assert step("pending", "activate") is KeyState.ACTIVE
    assert step("active", "rotate_out") is KeyState.ROTATING
    assert step("rotating", "retire") is KeyState.RETIRED
    with pytest.raises(IllegalTransition):
        step("active", "retire")  # must rotate out first
    with pytest.raises(IllegalTransition):
        step("retired", "activate")
    assert TRANSITIONS[KeyState.COMPROMISED] == {}  # terminal: never used again
    assert all(step(s, "compromise") is KeyState.COMPROMISED for s in KeyState if s is not KeyState.COMPROMISED)
    assert PUBLISHED == {KeyState.PENDING, KeyState.ACTIVE, KeyState.ROTATING}


def test_due_events():
    ks = [
        KeyTiming("p-new", KeyState.PENDING, NOW - dt.timedelta(seconds=10)),
        KeyTiming("p-old", KeyState.PENDING, NOW - dt.timedelta(seconds=3600)),
        KeyTiming("r-old", KeyState.ROTATING, NOW - dt.timedelta(days=7)),
        KeyTiming("r-new", KeyState.ROTATING, NOW - dt.timedelta(days=6, hours=23)),
        KeyTiming("a", KeyState.ACTIVE, NOW - dt.timedelta(days=90)),
    ]
    got = due_events(ks, NOW, publish_min=3600, rotating_grace=7 * 86400)
    assert got == [("p-old", KeyEvent.ACTIVATE), ("r-old", KeyEvent.RETIRE)]
    assert due_events(ks[:1], NOW, publish_min=3600, rotating_grace=1) == []

"""Scheduled key activation: a pending key activates at its scheduled time (not before, and never
earlier than keys_publish_min after it was published), found by the scheduler's due scan, through
the repository, the admin API and the CLI's parser alike; the key events record the schedule."""

from __future__ import annotations

import datetime as dt

import pytest

from ucp_gateway.errors import BadRequest
from ucp_gateway.keys import IllegalTransition, KeyState, ensure_active_key, list_keys, rotate
from ucp_gateway.keys.lifecycle import KeyTiming, due_events
from ucp_gateway.keys.repository import KeyNotFoundError, list_key_events, parse_activate_at, schedule_activation
from ucp_gateway.keys.scheduler import due_companies, run_once

from .test_admin_api import admin  # noqa: F401 - the fixture

PUB, GRACE = 3600, 7 * 86400
NOW = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)


def test_a_scheduled_pending_key_waits_for_its_time():
    published = NOW - dt.timedelta(seconds=2 * PUB)
    later = KeyTiming("k2", KeyState.PENDING, published, NOW + dt.timedelta(hours=1))
    assert due_events([later], NOW, publish_min=PUB, rotating_grace=GRACE) == []
    assert [k for k, _ in due_events([later], NOW + dt.timedelta(hours=1), publish_min=PUB, rotating_grace=GRACE)] == [
        "k2"
    ]
    # a schedule never makes a key activate before it was published publish_min
    early = KeyTiming("k3", KeyState.PENDING, NOW, NOW - dt.timedelta(hours=5))
    assert early.activation_due(PUB) == NOW + dt.timedelta(seconds=PUB)


def test_parse_activate_at():
    assert parse_activate_at("2026-06-01T14:00:00Z") == NOW + dt.timedelta(hours=2)
    assert parse_activate_at("2026-06-01T16:00:00+02:00") == NOW + dt.timedelta(hours=2)
    assert parse_activate_at(None) is None
    for bad in ("2026-06-01T14:00:00", "tomorrow", 5, ""):
        with pytest.raises(BadRequest):
            parse_activate_at(bad)


async def test_the_scheduler_activates_a_key_at_its_scheduled_time(database, vault, two_companies, clock):
    pool, (a, b) = database.pool, two_companies
    k1 = await ensure_active_key(pool, a.id, now=clock.now())
    new = await rotate(pool, a.id, actor="token:x", reason="planned", now=clock.now())
    with pytest.raises(BadRequest):  # before it was published publish_min
        await schedule_activation(pool, a.id, new.kid, clock.now() + dt.timedelta(seconds=PUB - 1), actor="t",
                                  now=clock.now(), publish_min=PUB)  # fmt: skip
    with pytest.raises(IllegalTransition):  # only a pending key activates
        await schedule_activation(pool, a.id, k1, clock.now() + dt.timedelta(days=1), actor="t", now=clock.now(),
                                  publish_min=PUB)  # fmt: skip
    at = clock.now() + dt.timedelta(days=2)
    key = await schedule_activation(pool, a.id, new.kid, at, actor="token:x", now=clock.now(), publish_min=PUB)
    assert key.activate_at == at and key.to_json()["activate_at"] == at.isoformat()

    clock.advance(PUB)  # the default rule would activate it now: the schedule holds it
    assert await due_companies(pool, now=clock.now(), publish_min=PUB, rotating_grace=GRACE, limit=10,
                               keyless=False) == []  # fmt: skip
    assert (await run_once(pool, now=clock.now(), publish_min=PUB, rotating_grace=GRACE)).done == {}
    clock.advance(2 * 86400 - PUB)
    due = await due_companies(pool, now=clock.now(), publish_min=PUB, rotating_grace=GRACE, limit=10, keyless=False)
    assert [d[0] for d in due] == [a.id]
    done = (await run_once(pool, now=clock.now(), publish_min=PUB, rotating_grace=GRACE)).done
    assert done == {"acme": [(new.kid, "activate")]}
    assert {k.kid: k.state for k in await list_keys(pool, a.id)} == {k1: KeyState.ROTATING, new.kid: KeyState.ACTIVE}
    events = await list_key_events(pool, a.id)
    assert [(e["event"], e["actor"]) for e in events if e["kid"] == new.kid] == [
        ("create", "token:x"), ("schedule_activation", "token:x"), ("activate", "scheduler")]  # fmt: skip
    assert next(e for e in events if e["kid"] == new.kid and e["event"] == "activate")["reason"] == (
        "scheduled activation"
    )
    with pytest.raises(KeyNotFoundError):  # RLS: another company's key is not found
        await schedule_activation(pool, b.id, new.kid, at, actor="t", now=clock.now(), publish_min=PUB)


async def test_the_admin_api_schedules_and_clears(admin, clock):  # noqa: F811
    call, _toks, _a, _ = admin
    st, body = await call("POST", "/admin/v1/keys/rotate", "admin")
    st, body = await call("POST", "/admin/v1/keys/rotate", "admin")
    kid = body["key"]["kid"]
    at = (clock.now() + dt.timedelta(days=1)).astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    st, body = await call("POST", f"/admin/v1/keys/{kid}/schedule", "employee", json={"activate_at": at})
    assert st == 403
    st, body = await call("POST", f"/admin/v1/keys/{kid}/schedule", "admin", json={"activate_at": at})
    assert st == 200 and body["activate_at"] == parse_activate_at(at).isoformat()
    st, body = await call("POST", f"/admin/v1/keys/{kid}/schedule", "admin", json={"activate_at": "soon"})
    assert st == 400
    st, body = await call("POST", f"/admin/v1/keys/{kid}/schedule", "admin", json={})
    assert st == 400
    st, body = await call("POST", f"/admin/v1/keys/{kid}/schedule", "admin", json={"activate_at": None})
    assert st == 200 and body["activate_at"] is None
    st, body = await call("GET", "/admin/v1/keys", "read_only")
    assert next(k for k in body["keys"] if k["kid"] == kid)["activate_at"] is None

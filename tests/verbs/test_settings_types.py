"""A company's ``settings.verbs.daily_caps`` of the wrong type: capped calls fail closed as
``company_misconfigured`` (nothing written), uncapped calls go on; real app, real database."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from ucp_gateway.app import create_app
from ucp_gateway.db import tenant_tx

from .test_http import token

ADJUST = {"verb": "inventory_adjust", "args": {"product_id": "orchid_white", "delta": 2}, "confirm": True}


async def _state(database, shop) -> tuple:
    """What a capped write would change: stock, cap usage, audit rows, idempotency records."""
    async with tenant_tx(database.pool, shop.id) as c:
        return (
            await c.fetchval("SELECT quantity FROM inventory WHERE product_id = 'orchid_white'"),
            await c.fetchval("SELECT coalesce(sum(used), 0) FROM verb_daily_usage"),
            await c.fetchval("SELECT count(*) FROM verb_audit_log"),
            await c.fetchval("SELECT count(*) FROM verb_idempotency"),
        )


@pytest.mark.parametrize(
    ("verbs", "path", "json_type"),
    [
        ("x", "verbs", "string"),
        ([{"daily_caps": {}}], "verbs", "array"),
        ({"daily_caps": 5}, "verbs.daily_caps", "number"),
        ({"daily_caps": ["WRITE_REVERSIBLE", 5]}, "verbs.daily_caps", "array"),
        ({"daily_caps": {"WRITE_REVERSIBLE": "5"}}, "verbs.daily_caps.WRITE_REVERSIBLE", "string"),
        ({"daily_caps": {"WRITE_REVERSIBLE": "many"}}, "verbs.daily_caps.WRITE_REVERSIBLE", "string"),
        ({"daily_caps": {"WRITE_REVERSIBLE": 2.5}}, "verbs.daily_caps.WRITE_REVERSIBLE", "number"),
        ({"daily_caps": {"WRITE_REVERSIBLE": -1}}, "verbs.daily_caps.WRITE_REVERSIBLE", "number"),
        ({"daily_caps": {"WRITE_REVERSIBLE": True}}, "verbs.daily_caps.WRITE_REVERSIBLE", "boolean"),
        # regression (security review): read as a cap, then the int4 counter failed every capped call
        ({"daily_caps": {"WRITE_REVERSIBLE": 2**31}}, "verbs.daily_caps.WRITE_REVERSIBLE", "number"),
        # another class's cap is malformed: the table as a whole is refused
        ({"daily_caps": {"IRREVERSIBLE": {"max": 1}}}, "verbs.daily_caps.IRREVERSIBLE", "object"),
    ],
)
async def test_malformed_daily_caps_refuse_capped_calls_and_write_nothing(
    aiohttp_client, database, db_settings, clock, shop, verbs, path, json_type
):
    async with tenant_tx(database.pool, shop.id) as c:
        await c.execute("UPDATE companies SET settings = settings || $1::jsonb", {"verbs": verbs})
    client = await aiohttp_client(create_app(db_settings, clock=clock, database=database))
    staff = await token(database, shop, "employee")
    before = await _state(database, shop)
    with capture_logs() as logs:
        for key in ("k-1", None):  # with an Idempotency-Key and without
            headers = {**staff, "Idempotency-Key": key} if key else staff
            r = await client.post("/api/v1/agent/dispatch", json=ADJUST, headers=headers)
            assert r.status == 500 and r.content_type == "application/json"
            body = await r.json()
            assert body["code"] == "company_misconfigured", body
            assert f"settings.{path} must be" in body["content"] and "'flower-shop'" in body["content"], body
    assert await _state(database, shop) == before  # no stock change, cap use, audit row or key
    bad = [e for e in logs if e["event"] == "company_settings_invalid"]
    assert len(bad) == 1, logs  # once for the loaded row, not once per request
    assert bad[0]["path"] == path and bad[0]["json_type"] == json_type and bad[0]["effect"] == "refused"
    assert bad[0]["slug"] == "flower-shop" and bad[0]["company_id"] == str(shop.id)
    # a call that no cap counts goes on
    r = await client.post("/api/v1/agent/dispatch", json={"verb": "capability.manifest"}, headers=staff)
    assert r.status == 200 and (await r.json())["ok"]


async def test_well_formed_daily_caps_still_apply(aiohttp_client, database, db_settings, clock, shop):
    caps = {"daily_caps": {"WRITE_REVERSIBLE": 1, "IRREVERSIBLE": None, "custom_bucket": 0}}
    async with tenant_tx(database.pool, shop.id) as c:
        await c.execute("UPDATE companies SET settings = settings || $1::jsonb", {"verbs": caps})
    client = await aiohttp_client(create_app(db_settings, clock=clock, database=database))
    staff = await token(database, shop, "employee")
    first = await (await client.post("/api/v1/agent/dispatch", json=ADJUST, headers=staff)).json()
    assert first["ok"], first
    second = await (await client.post("/api/v1/agent/dispatch", json=ADJUST, headers=staff)).json()
    assert second["error"]["reason"] == "daily_cap_exceeded" and "cap of 1" in second["error"]["message"]

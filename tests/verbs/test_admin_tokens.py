"""The HTTP front door accepts company admin API tokens (signatures work) when that module is present."""

import pytest

from ucp_gateway.app import create_app

admin_tokens = pytest.importorskip("ucp_gateway.keys.admin_tokens")


async def test_admin_token_dispatch(aiohttp_client, shop, database, db_settings, clock):
    token, _ = await admin_tokens.create_admin_token(database.pool, shop.id, "employee", now=clock.now())
    client = await aiohttp_client(create_app(db_settings, clock=clock, database=database))
    h = {"Host": "flower-shop.test", "Authorization": f"Bearer {token}"}
    body = {"verb": "crm_contact_update", "args": {"contact_id": 1, "status": "vip"}, "confirm": True}
    env = await (await client.post("/api/v1/agent/dispatch", json=body, headers=h)).json()
    assert env["ok"], env
    denied = await (
        await client.post(
            "/api/v1/agent/dispatch",
            headers=h,
            json={"verb": "payments.refund", "args": {"order_id": "ord_1", "amount": 1, "currency": "USD"}},
        )
    ).json()
    assert denied["error"]["reason"] == "role_denied"
    bad = {**h, "Authorization": "Bearer " + token[:-4] + "AAAA"}
    assert (await client.post("/api/v1/agent/dispatch", json=body, headers=bad)).status == 401

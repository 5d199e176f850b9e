"""Staff views of real UCP orders: the admin API, the staff verbs, the CLI and explain_total, on
orders placed by buyer agents through /ucp/v1 (one of them signed, RFC 9421, end to end)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.keys.admin_tokens import create_admin_token
from ucp_gateway.tenancy import create_company

from ..test_cli import run as run_cli
from .conftest import SHIP_US, agent, headers, new_key, pay, payload, url
from .signedflow import buyer, shop, signed  # noqa: F401 - fixtures of the signed buyer


async def _order(client, item="pot_ceramic", qty=2, codes=("10OFF",)) -> dict:
    r = await client.post(url("/checkout-sessions"), json=payload(item, qty), headers=headers(key=new_key()))
    co = await r.json()
    upd = payload(item, qty, fulfillment=SHIP_US, discounts={"codes": list(codes)})
    r = await client.put(url(f"/checkout-sessions/{co['id']}"), json=upd, headers=headers(key=new_key()))
    assert r.status == 200
    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    done = await r.json()
    assert done["status"] == "completed", done
    return done["order"]


async def _token(database, company, role="employee") -> dict:
    token, _ = await create_admin_token(database.pool, company.id, role, now=datetime.now(UTC))
    return {"Authorization": f"Bearer {token}"}


async def test_admin_api_lists_and_shows_real_orders(client, database, company):
    first = await _order(client)
    second = await _order(client, "bouquet_roses", 1, codes=())
    auth = await _token(database, company)

    r = await client.get("/admin/v1/orders?limit=1", headers=auth)
    page = await r.json()
    assert r.status == 200, page
    assert [o["id"] for o in page["orders"]] == [second["id"]]  # newest first
    assert page["orders"][0]["platform"] == agent() and page["orders"][0]["currency"] == "USD"
    r = await client.get("/admin/v1/orders", params={"limit": "1", "cursor": page["next_cursor"]}, headers=auth)
    page2 = await r.json()
    assert [o["id"] for o in page2["orders"]] == [first["id"]] and page2["next_cursor"] is None

    r = await client.get(f"/admin/v1/orders/{first['id']}", headers=auth)
    view = await r.json()
    assert r.status == 200, view
    assert view["order"]["id"] == first["id"] and view["platform"] == agent() and not view["platform_verified"]
    assert {t["type"]: t["amount"] for t in view["order"]["totals"]}["total"] == 3200
    assert [p["status"] for p in view["payments"]] == ["captured"] and view["payments"][0]["amount"] == 3200
    assert "token_ref" not in json.dumps(view) and "success_token" not in json.dumps(view)
    # the completed order's webhook is queued (no worker in this app): its delivery state is shown
    assert [(w["event_type"], w["state"]) for w in view["webhooks"]] == [("order.created", "queued")]
    assert page2["orders"][0]["webhooks"] == {"delivered": 0, "queued": 1, "dead": 0}
    async with tenant_tx(database.pool, company.id) as conn:  # the dead-letter state, as the worker sets it
        await conn.execute("UPDATE webhook_outbox SET dead_at = now(), attempts = 8, last_error = 'HTTP 410'"
                           " WHERE order_id = $1", first["id"])  # fmt: skip
    view = await (await client.get(f"/admin/v1/orders/{first['id']}", headers=auth)).json()
    assert [(w["state"], w["attempts"], w["last_error"]) for w in view["webhooks"]] == [("dead", 8, "HTTP 410")]
    page2 = await (await client.get("/admin/v1/orders", params={"cursor": page["next_cursor"]}, headers=auth)).json()
    assert page2["orders"][0]["webhooks"] == {"delivered": 0, "queued": 0, "dead": 1}


@pytest.mark.parametrize(
    "path, status, code",
    [
        ("/admin/v1/orders?cursor=%21%21", 400, "invalid_cursor"),
        ("/admin/v1/orders?cursor=" + "QQ", 400, "invalid_cursor"),  # decodes, but is no key of ours
        ("/admin/v1/orders?limit=0", 400, "invalid_request"),
        ("/admin/v1/orders?limit=lots", 400, "invalid_request"),
        ("/admin/v1/orders/ord_nope", 404, "not_found"),
    ],
)
async def test_admin_api_bad_input(client, database, company, path, status, code):
    auth = await _token(database, company)
    r = await client.get(path, headers=auth)
    assert r.status == status and (await r.json())["code"] == code


async def test_admin_api_role_floor_and_tenancy(client, database, company):
    placed = await _order(client)
    r = await client.get("/admin/v1/orders", headers=await _token(database, company, "read_only"))
    assert r.status == 403
    r = await client.get("/admin/v1/orders")
    assert r.status == 401
    # another company's staff token is refused on this host, and sees none of these orders at home
    other = await create_company(database.pool, slug="other-shop", display_name="Other", hostnames=["other.example"])
    other_auth = await _token(database, other)
    r = await client.get(f"/admin/v1/orders/{placed['id']}", headers=other_auth)
    assert r.status == 401
    async with tenant_tx(database.pool, other.id) as conn:
        from ucp_gateway.commerce.staff import list_orders, show_order

        assert (await list_orders(conn))["orders"] == []
        with pytest.raises(Exception, match="no order"):
            await show_order(conn, placed["id"])


async def test_staff_verbs_and_explain_total_on_a_ucp_order(client, database, company):
    placed = await _order(client)
    auth = await _token(database, company)
    body = {"verb": "orders.list", "args": {"limit": 5}}
    r = await client.post("/api/v1/agent/dispatch", json=body, headers=auth)
    env = await r.json()
    assert env["ok"], env
    assert [o["id"] for o in env["result"]["data"]["orders"]] == [placed["id"]]
    body = {"verb": "orders.show", "args": {"order_id": placed["id"]}}
    env = await (await client.post("/api/v1/agent/dispatch", json=body, headers=auth)).json()
    assert env["ok"] and env["result"]["data"]["order"]["id"] == placed["id"], env

    body = {"verb": "orders.explain_total", "args": {"order_id": placed["id"]}}
    env = await (await client.post("/api/v1/agent/dispatch", json=body, headers=auth)).json()
    assert env["ok"], env
    res = env["result"]
    assert [s["action"] for s in res["causal_chain"]] == [
        "line_item",
        "subtotal",
        "discount_applied",
        "shipping",
        "total",
        "payment_captured",
    ]
    assert res["current_state"] == {"total": 3200, "paid": 3200, "currency": "USD"}
    assert res["reasoning"] == "Total $32.00 = subtotal $30.00, minus $3.00 for 10OFF, plus fulfillment $5.00."
    # the back-office demo orders are still explained from the catalogue
    body = {"verb": "orders.explain_total", "args": {"order_id": "ord_1"}}
    env = await (await client.post("/api/v1/agent/dispatch", json=body, headers=auth)).json()
    assert env["ok"] and env["result"]["current_state"]["total"] == 7650, env


async def test_staff_see_the_signed_buyers_order(shop, buyer, database, company, db_settings):  # noqa: F811
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    base = "/ucp/v1"
    r = await signed(shop, buyer, "POST", base + "/checkout-sessions", create, new_key())
    co = await r.json()
    assert r.status == 201, co
    upd = {**create, "fulfillment": SHIP_US}
    r = await signed(shop, buyer, "PUT", base + f"/checkout-sessions/{co['id']}", upd, new_key())
    assert (await r.json())["status"] == "ready_for_complete"
    r = await signed(shop, buyer, "POST", base + f"/checkout-sessions/{co['id']}/complete", pay(), new_key())
    done = await r.json()
    assert done["status"] == "completed", done

    r = await shop.get(f"/admin/v1/orders/{done['order']['id']}", headers=await _token(database, company))
    view = await r.json()
    assert r.status == 200 and view["platform"] == f"{buyer.base}/profile/a.json" and view["platform_verified"], view

    # the same order from the command line (a real process, as an operator runs it)
    env = {"DATABASE_URL": db_settings.database_url}
    p = await asyncio.to_thread(run_cli, ["orders", "list", "--company", company.slug, "--json"], env)
    assert p.returncode == 0, p.stderr
    assert done["order"]["id"] in [o["id"] for o in json.loads(p.stdout)["orders"]]
    p = await asyncio.to_thread(run_cli, ["orders", "show", "--company", company.slug, done["order"]["id"]], env)
    assert p.returncode == 0, p.stderr
    assert done["order"]["id"] in p.stdout and "payment" in p.stdout and "order.created" in p.stdout
    p = await asyncio.to_thread(run_cli, ["orders", "show", "--company", company.slug, "ord_nope"], env)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "no order" in p.stderr

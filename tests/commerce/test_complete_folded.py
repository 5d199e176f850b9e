"""checkout.complete of one product through the verb runtime: the order statement goes out with the
audit row and idempotency record (one statement). A short stock writes nothing of the order; the
answer is the recoverable out_of_stock checkout, audited and replayed as before."""

from __future__ import annotations

from ucp_gateway.db import tenant_tx
from ucp_gateway.verbs.audit import verify_chain

from .conftest import SHIP_US, headers, new_key, pay, payload, url


async def _counts(conn, cid: str) -> tuple[int, int, int, int]:
    return (
        await conn.fetchval("SELECT count(*) FROM orders WHERE checkout_id = $1", cid),
        await conn.fetchval("SELECT count(*) FROM payments WHERE checkout_id = $1", cid),
        await conn.fetchval("SELECT count(*) FROM webhook_outbox"),
        await conn.fetchval("SELECT count(*) FROM webhook_queue"),
    )


async def test_short_stock_writes_nothing_of_the_order_and_is_audited(client, database, company):
    r = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    cid = (await r.json())["id"]
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE inventory SET quantity = 0 WHERE product_id = 'bouquet_roses'")
        outbox0 = await conn.fetchval("SELECT count(*) FROM webhook_outbox")
        audit0 = await conn.fetchval("SELECT count(*) FROM verb_audit_log")
    key = new_key()
    a = await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=key))
    body = await a.json()
    assert a.status == 200 and body["status"] != "completed", body
    assert [m["code"] for m in body["messages"] if m["type"] == "error"] == ["out_of_stock"]
    b = await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=key))
    assert (b.status, await b.read()) == (200, await a.read())  # byte-identical replay, executed once
    async with tenant_tx(database.pool, company.id) as conn:
        assert await _counts(conn, cid) == (0, 0, outbox0, outbox0)
        row = await conn.fetchrow("SELECT status, order_id FROM checkout_sessions WHERE id = $1", cid)
        assert (row["status"], row["order_id"]) == (body["status"], None)
        assert await conn.fetchval("SELECT quantity FROM inventory WHERE product_id = 'bouquet_roses'") == 0
        audit = await conn.fetch(
            "SELECT verb, decision, status FROM verb_audit_log ORDER BY audit_id OFFSET $1", audit0
        )
        assert [tuple(x) for x in audit] == [
            ("checkout.complete", "allowed", "completed"),
            ("checkout.complete", "replayed", "completed"),
        ]
        assert (await verify_chain(conn, company.id)).ok
        await conn.execute("UPDATE inventory SET quantity = 5 WHERE product_id = 'bouquet_roses'")
    # restocked: a new key completes it, with everything in the one statement
    c = await client.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=new_key()))
    done = await c.json()
    assert c.status == 200 and done["status"] == "completed", done
    async with tenant_tx(database.pool, company.id) as conn:
        assert await _counts(conn, cid) == (1, 1, outbox0 + 1, outbox0 + 1)
        assert await conn.fetchval("SELECT quantity FROM inventory WHERE product_id = 'bouquet_roses'") == 4
        assert (await verify_chain(conn, company.id)).ok


async def test_declined_payment_is_still_recorded_as_before(client, database, company):
    r = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=headers(key=new_key()))
    cid = (await r.json())["id"]
    a = await client.post(
        url(f"/checkout-sessions/{cid}/complete"), json=pay("fail_token"), headers=headers(key=new_key())
    )
    body = await a.json()
    assert a.status == 200 and "payment_failed" in [m["code"] for m in body["messages"]], body
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM orders WHERE checkout_id = $1", cid) == 0
        assert await conn.fetchval("SELECT status FROM payments WHERE checkout_id = $1", cid) == "declined"
        assert (await verify_chain(conn, company.id)).ok

"""REST binding against real PostgreSQL and a real aiohttp server."""

from __future__ import annotations

import json

from ucp_gateway.db import tenant_tx

from ..ucp_models import validate
from .conftest import SHIP_US, agent, headers, make_app, new_key, pay, payload, started, url


async def _create(client, body=None, **kw):
    r = await client.post(url("/checkout-sessions"), json=body or payload(**kw), headers=headers(key=new_key()))
    return r, await r.json()


async def test_create_get_update_complete_flow(client):
    r, co = await _create(client, payload(fulfillment=SHIP_US))
    assert r.status == 201, co
    validate("checkout", co)
    assert co["status"] == "ready_for_complete" and co["currency"] == "USD"
    assert co["continue_url"].endswith(f"/checkout-sessions/{co['id']}")
    assert {lk["type"] for lk in co["links"]} == {"terms_of_service", "privacy_policy"}
    # roses ship free (promotion): total = 3500
    assert co["totals"][-1] == {"type": "total", "amount": 3500}

    r = await client.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    assert r.status == 200 and (await r.json())["id"] == co["id"]

    upd = payload(
        "pot_ceramic",
        2,
        fulfillment=SHIP_US,
        discounts={"codes": ["10off"]},
        buyer={
            "email": "x@example.com",
            "consent": {"analytics": False, "marketing": True, "preferences": True, "sale_of_data": False},
        },
    )
    r = await client.put(url(f"/checkout-sessions/{co['id']}"), json=upd, headers=headers(key=new_key()))
    co2 = await r.json()
    assert r.status == 200, co2
    t = {x["type"]: x["amount"] for x in co2["totals"]}
    assert t == {"subtotal": 3000, "discount": -300, "fulfillment": 500, "total": 3200}
    assert co2["buyer"]["consent"] == {
        "analytics": False,
        "marketing": True,
        "preferences": True,
        "sale_of_data": False,
    }
    assert co2["discounts"]["applied"][0]["code"] == "10OFF"

    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    done = await r.json()
    assert r.status == 200, done
    assert done["status"] == "completed" and "continue_url" not in done
    assert "success_token" not in await r.text()
    order_id = done["order"]["id"]

    r = await client.get(url(f"/orders/{order_id}"), headers=headers())
    order = await r.json()
    validate("order", order)
    assert order["checkout_id"] == co["id"] and order["currency"] == "USD"
    assert order["totals"] == co2["totals"]
    assert order["line_items"][0]["quantity"] == {"original": 2, "total": 2, "fulfilled": 0}
    assert order["fulfillment"]["expectations"][0]["method_type"] == "shipping"


async def test_unknown_ids_are_200_not_found_envelopes(client):
    for method, path in (
        ("GET", "/checkout-sessions/nope"),
        ("GET", "/orders/nope"),
        ("POST", "/checkout-sessions/nope/cancel"),
    ):
        r = await client.request(method, url(path), headers=headers())
        body = await r.json()
        assert r.status == 200
        assert body["ucp"]["status"] == "error" and body["messages"][0]["code"] == "not_found"
        assert body["messages"][0]["severity"] == "unrecoverable"


async def test_invalid_transitions_are_409(client):
    _, co = await _create(client, payload(fulfillment=SHIP_US))
    cid = co["id"]
    r = await client.post(url(f"/checkout-sessions/{cid}/cancel"), headers=headers())
    assert r.status == 200 and (await r.json())["status"] == "canceled"
    for method, path, body in (
        ("POST", f"/checkout-sessions/{cid}/cancel", None),
        ("PUT", f"/checkout-sessions/{cid}", payload()),
        ("POST", f"/checkout-sessions/{cid}/complete", pay()),
    ):
        r = await client.request(method, url(path), json=body, headers=headers(key=new_key()))
        assert r.status == 409, await r.text()
        assert (await r.json())["code"] == "checkout_not_modifiable"


async def test_cancel_with_a_broken_body_is_400_and_cancels_nothing(client):
    """Regression: cancel ignored its body, so ``{bad`` (labelled JSON) canceled the checkout."""
    _, co = await _create(client, payload(fulfillment=SHIP_US))
    cid = co["id"]
    for bad in (b"{bad", b"[]", b'"x"'):
        hdrs = {**headers(key=new_key()), "Content-Type": "application/json"}
        r = await client.post(url(f"/checkout-sessions/{cid}/cancel"), data=bad, headers=hdrs)
        assert r.status == 400, (bad, await r.text())
        assert (await r.json())["code"] == "invalid_request"
    r = await client.get(url(f"/checkout-sessions/{cid}"), headers=headers())
    assert r.status == 200 and (await r.json())["status"] != "canceled"
    r = await client.post(url(f"/checkout-sessions/{cid}/cancel"), json={}, headers=headers(key=new_key()))
    assert r.status == 200 and (await r.json())["status"] == "canceled"


async def test_bad_input_never_500(client):
    r, body = await _create(client, payload(qty=0))
    assert r.status == 400 and "quantity" in body["content"]
    r, body = await _create(client, payload(qty=-3))
    assert r.status == 400
    for qty in ("3", True):  # regression: read as 3 and 1 (pydantic's lax mode), 201
        r, body = await _create(client, payload(qty=qty))
        assert r.status == 400 and body["code"] == "invalid_request" and "quantity" in body["content"], body
    r, body = await _create(client, {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}] * 101})
    assert r.status == 400 and body["content"] == "$.line_items: at most 100 line items", body
    r = await client.post(url("/checkout-sessions"), data=b"{not json", headers=headers())
    assert r.status == 400
    r, body = await _create(client, payload("no_such_product"))
    assert r.status == 200 and body["messages"][0]["code"] == "item_unavailable"
    r, body = await _create(client, payload("gardenias"))
    assert r.status == 200 and body["messages"][0]["code"] == "out_of_stock"
    r, body = await _create(client, payload(qty=100000))
    assert r.status == 200 and body["ucp"]["status"] == "error"
    # a mix: the checkout exists, the unknown line is a recoverable message
    mixed = {
        "line_items": [
            {"item": {"id": "pot_ceramic"}, "quantity": 1},
            {"item": {"id": "zzz"}, "quantity": 1},
        ],
        "context": {"currency": "EUR"},
    }
    r, body = await _create(client, mixed)
    assert r.status == 201 and body["status"] == "incomplete"
    codes = {m["code"] for m in body["messages"]}
    assert {"item_unavailable", "currency_unsupported"} <= codes


async def test_body_without_json_content_type_is_415(client):
    raw = json.dumps(payload()).encode()
    h = {k: v for k, v in headers(key=new_key()).items() if k != "Content-Type"}
    r = await client.post(url("/checkout-sessions"), data=raw, headers=h, skip_auto_headers=["Content-Type"])
    assert r.status == 415 and (await r.json())["code"] == "unsupported_media_type"
    r = await client.post(url("/checkout-sessions"), data=raw, headers={**h, "Content-Type": "text/plain"})
    assert r.status == 415
    r = await client.post(url("/checkout-sessions"), data=raw, headers={**h, "Content-Type": "application/json"})
    assert r.status == 201


async def test_error_bodies_are_compact_json_like_the_data(client):
    """Regression: errors written by mediatype.json_response came as ``{"code": "...", ...}`` (the
    json module's default spacing) while UCP bodies and the fast paths' errors are compact: one
    client saw two spellings of one envelope."""
    r = await client.get(url("/no-such-route"), headers=headers())  # the foundation's error (middleware.py)
    text = await r.read()
    assert r.status == 404 and r.headers["Content-Type"] == "application/json"
    assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False).encode(), text
    r = await client.post(url("/checkout-sessions"), json=payload(), headers=headers(key=new_key()))
    data = await r.read()
    assert r.status == 201
    assert data == json.dumps(json.loads(data), separators=(",", ":"), ensure_ascii=False).encode()


async def test_non_utf8_json_bodies_are_400_and_write_nothing(client, database, company):
    """Regression (newcomer): a UTF-16-LE body without a BOM created a checkout (201); the json
    module guesses the encoding. RFC 8259 §8.1: JSON between systems MUST be UTF-8."""
    text = json.dumps(payload())
    key = new_key()
    for raw in (
        text.encode("utf-16-le"),
        text.encode("utf-16"),  # with a BOM
        text.encode("utf-32-be"),
        text.encode()[:-1] + b"\x00}",  # a raw NUL byte: UTF-8, but never JSON
    ):
        r = await client.post(url("/checkout-sessions"), data=raw, headers=headers(key=key))
        assert r.status == 400, (raw[:8], await r.text())
        body = await r.json()
        assert body["code"] == "invalid_request" and "must be UTF-8" in body["content"], body
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM checkout_sessions") == 0
    # the Idempotency-Key was not spent on the refusals: the same key with the UTF-8 body creates it
    r = await client.post(url("/checkout-sessions"), data=text.encode(), headers=headers(key=key))
    assert r.status == 201, await r.text()


async def test_a_charset_other_than_utf8_is_415(client):
    """RFC 8259 §8.1: the body is not parsed as UTF-8 against a label saying otherwise."""
    raw = json.dumps(payload()).encode()
    for ct in ("application/json; charset=utf-16", "application/json;charset=latin1", 'application/json;charset=""'):
        h = {**headers(key=new_key()), "Content-Type": ct}
        r = await client.post(url("/checkout-sessions"), data=raw, headers=h)
        assert r.status == 415, (ct, await r.text())
        body = await r.json()
        assert body["code"] == "unsupported_media_type" and "charset must be utf-8" in body["content"], body
    for ct in ("application/json; charset=utf-8", 'application/json; charset="UTF-8"'):
        h = {**headers(key=new_key()), "Content-Type": ct}
        r = await client.post(url("/checkout-sessions"), data=raw, headers=h)
        assert r.status == 201, (ct, await r.text())


async def test_client_prices_and_status_are_ignored(client):
    body = payload(fulfillment=SHIP_US)
    body.update(id="mine", status="completed", currency="EUR", totals=[{"type": "total", "amount": 1}])
    body["line_items"][0]["item"].update(price=1, title="Cheap")
    r, co = await _create(client, body)
    assert r.status == 201 and co["id"] != "mine" and co["currency"] == "USD"
    assert co["line_items"][0]["item"] == {
        "id": "bouquet_roses",
        "title": "Bouquet of Red Roses",
        "price": 3500,
        "image_url": "https://example.com/roses.jpg",
    }


async def test_payment_decline_is_recoverable_message(client):
    _, co = await _create(client, payload(fulfillment=SHIP_US))
    r = await client.post(
        url(f"/checkout-sessions/{co['id']}/complete"),
        json=pay("fail_token", "instr_fail"),
        headers=headers(key=new_key()),
    )
    body = await r.json()
    assert r.status == 200 and body["status"] == "incomplete"
    assert [m["code"] for m in body["messages"] if m["type"] == "error"] == ["payment_failed"]
    assert body["messages"][-1]["severity"] == "recoverable"
    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    assert (await r.json())["status"] == "completed"


async def test_complete_checks_handler_and_requires_key(client):
    _, co = await _create(client, payload(fulfillment=SHIP_US))
    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers())
    assert r.status == 400
    bad = pay()
    bad["payment"]["instruments"][0]["handler_id"] = "other"
    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=bad, headers=headers(key=new_key()))
    body = await r.json()
    assert body["status"] == "incomplete"
    assert [m["code"] for m in body["messages"] if m["type"] == "error"] == ["payment_handler_unsupported"]


async def test_complete_without_fulfillment_is_incomplete(client):
    _, co = await _create(client)
    assert co["status"] == "incomplete"
    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    body = await r.json()
    assert r.status == 200 and body["status"] == "incomplete"
    assert any(m["path"].startswith("$.fulfillment") for m in body["messages"])


async def test_missing_ucp_agent_is_400(client):
    r = await client.post(url("/checkout-sessions"), json=payload())
    assert r.status == 400 and (await r.json())["code"] == "invalid_profile_url"


async def test_orders_are_visible_only_to_their_platform(client):
    _, co = await _create(client, payload(fulfillment=SHIP_US))
    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    oid = (await r.json())["order"]["id"]
    r = await client.get(url(f"/orders/{oid}"), headers=headers(agent("other")))
    assert (await r.json())["messages"][0]["code"] == "not_found"


async def test_expiry_cancels(frozen_client, clock):
    r = await frozen_client.post(url("/checkout-sessions"), json=payload(), headers=headers())
    co = await r.json()
    assert co["expires_at"] == "2026-04-08T18:00:00Z"
    clock.advance(6 * 3600)
    r = await frozen_client.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    body = await r.json()
    assert body["status"] == "canceled" and "continue_url" not in body
    r = await frozen_client.put(url(f"/checkout-sessions/{co['id']}"), json=payload(), headers=headers())
    assert r.status == 409


async def test_gzip_body_is_decoded_after_verification(client):
    import gzip
    import json as _json

    raw = gzip.compress(_json.dumps(payload(fulfillment=SHIP_US)).encode())
    h = headers(key=new_key())
    h["Content-Encoding"] = "gzip"
    r = await client.post(url("/checkout-sessions"), data=raw, headers=h)
    assert r.status == 201, await r.text()
    assert (await r.json())["line_items"][0]["item"]["id"] == "bouquet_roses"


async def test_a_gzip_body_decoding_past_the_body_limit_is_400(client, database, company):
    """Regression (security review): decoded bodies were allowed 10 MB, ten times
    ``client_max_size``; a 10 kB gzip body made the gateway decode and validate 10 MB."""
    import gzip

    body = payload()
    body["buyer"] = {"email": "a@example.com", "first_name": "x" * (1 << 20)}  # just over 1 MiB decoded
    raw = gzip.compress(json.dumps(body).encode())
    assert len(raw) < 10_000
    h = {**headers(key=new_key()), "Content-Encoding": "gzip"}
    r = await client.post(url("/checkout-sessions"), data=raw, headers=h)
    assert r.status == 400, await r.text()
    assert (await r.json()) == {"code": "invalid_request", "content": "decompressed body too large"}
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM checkout_sessions") == 0


async def test_a_truncated_or_trailing_gzip_body_is_400(client, database, company):
    """Regression (review): a truncated gzip stream was read as far as it went, and a second gzip
    member after the first was ignored: part of the signed body went unread."""
    import gzip

    raw = gzip.compress(json.dumps(payload()).encode())
    h = {"Content-Encoding": "gzip"}
    for bad in (raw[:-8], raw + gzip.compress(b'{"x": 1}'), raw + b"junk"):
        r = await client.post(url("/checkout-sessions"), data=bad, headers={**headers(key=new_key()), **h})
        assert r.status == 400, await r.text()
        assert await r.json() == {"code": "invalid_request", "content": "corrupt compressed body"}
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM checkout_sessions") == 0
    r = await client.post(url("/checkout-sessions"), data=raw, headers={**headers(key=new_key()), **h})
    assert r.status == 201, await r.text()


async def test_two_content_encoding_lines_are_415(client, database, company):
    """Review: with ``identity`` then ``gzip`` on two lines the gateway read the first only, a proxy
    merging them would read ``identity, gzip``: one body, two readings. Refused."""
    from multidict import CIMultiDict

    raw = json.dumps(payload()).encode()
    h = CIMultiDict(headers(key=new_key()))
    h.add("Content-Encoding", "identity")
    h.add("Content-Encoding", "gzip")
    r = await client.post(url("/checkout-sessions"), data=raw, headers=h)
    assert r.status == 415, await r.text()
    assert (await r.json())["content"] == "send one Content-Encoding line"
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM checkout_sessions") == 0


async def test_per_buyer_agent_limits(aiohttp_client, database, db_settings, company, platform):
    """Rate and order amount are limited per buyer agent, not by company-wide caps."""
    app = make_app(database, db_settings, buyer_rate_limit=3, buyer_max_order_amount=5000)
    c = await started(aiohttp_client, app, database, company)
    r = await c.post(
        url("/checkout-sessions"), json=payload("orchid_white", 2, fulfillment=SHIP_US), headers=headers(key=new_key())
    )
    cid = (await r.json())["id"]
    r = await c.post(url(f"/checkout-sessions/{cid}/complete"), json=pay(), headers=headers(key=new_key()))
    body = await r.json()
    assert body["status"] == "requires_escalation" and body["continue_url"]
    assert any(
        m["code"] == "amount_limit_exceeded" and m["severity"] == "requires_buyer_review" for m in body["messages"]
    )
    statuses = [(await c.get(url(f"/checkout-sessions/{cid}"), headers=headers())).status for _ in range(3)]
    assert statuses[-1] == 429
    # Regression: an unsigned caller naming another profile got a fresh budget, so one client could
    # multiply its limit by minting profile URLs. Unsigned callers share one budget per company
    # (verified agents keep their own: tests/commerce/test_ratelimit.py).
    r = await c.get(url(f"/checkout-sessions/{cid}"), headers=headers(agent("other")))
    assert r.status == 429 and (await r.json())["code"] == "rate_limited"


async def test_refused_write_on_expired_session_leaves_it_untouched(frozen_client, clock, database, company):
    """A writer refuses an expired session (409) without writing; a read then cancels it."""
    r = await frozen_client.post(url("/checkout-sessions"), json=payload(), headers=headers(key=new_key()))
    co = await r.json()
    clock.advance(6 * 3600)
    for path, body in ((f"/checkout-sessions/{co['id']}", payload()), (f"/checkout-sessions/{co['id']}/cancel", {})):
        r = await frozen_client.request(
            "PUT" if path.endswith(co["id"]) else "POST", url(path), json=body, headers=headers(key=new_key())
        )
        assert r.status == 409 and "canceled" in (await r.json())["content"]
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT status FROM checkout_sessions WHERE id = $1", co["id"]) == co["status"]
    r = await frozen_client.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    assert (await r.json())["status"] == "canceled"


async def test_checkout_links_keep_the_public_port(aiohttp_client, database, db_settings, company, platform):
    """Regression: commerce built its origin from the Host alone, ignoring ``public_port`` (a gateway
    behind a proxy on :8443 linked continue_url and order permalinks to the default port)."""
    app = make_app(database, db_settings, public_port=8443)
    client = await started(aiohttp_client, app, database, company)
    h = {**headers(key=new_key()), "Host": "127.0.0.1"}
    r = await client.post(url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers=h)
    co = await r.json()
    assert r.status == 201, co
    assert co["continue_url"].startswith(f"{db_settings.public_scheme}://127.0.0.1:8443/"), co["continue_url"]


async def test_checkout_links_lower_case_the_host(client):
    """Regression (newcomer): ``Host: LOCALHOST:<port>`` was echoed as written into continue_url and
    links, where /.well-known/ucp lower-cases it."""
    port = client.server.port
    h = {**headers(key=new_key()), "Host": f"LocalHost:{port}"}
    r = await client.post(url("/checkout-sessions"), json=payload(), headers=h)
    co = await r.json()
    assert r.status == 201, co
    urls = [co["continue_url"], *(link["url"] for link in co["links"])]
    assert all(u.split("/")[2] == f"localhost:{port}" for u in urls), urls


async def test_unstorable_input_is_400_never_503(client):
    """Regression (newcomer fuzzing): U+0000, unpaired surrogates and deep nesting reached
    PostgreSQL or the JSON parser and came back as 503 execution_failed naming the exception."""
    bodies = [
        b'{"line_items": [{"item": {"id": "pot\\u0000"}, "quantity": 1}]}',
        b'{"line_items": [{"item": {"id": "\\ud800"}, "quantity": 1}]}',
        b"[" * 100_000 + b"]" * 100_000,
        # regression (newcomer): 1e400 in a free-form field was read as inf and stored as null
        b'{"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}], "buyer": {"email": "a@b.co", "x": 1e400}}',
    ]
    for raw in bodies:
        r = await client.post(url("/checkout-sessions"), data=raw, headers=headers(key=new_key()))
        body = await r.json()
        assert r.status == 400 and body["code"] == "invalid_request", body
    for path in ("/checkout-sessions/%00", "/orders/ord_%00"):
        r = await client.get(url(path), headers=headers())
        body = await r.json()
        assert r.status == 400 and body["code"] == "invalid_request", (path, body)
        assert "Error" not in body["content"]


async def test_get_returns_the_body_as_written(client):
    """Migration 0054: the stored checkout is json (kept as written), so a GET answers exactly the
    bytes the create answered, key order included."""
    r = await client.post(url("/checkout-sessions"), json=payload(), headers=headers(key=new_key()))
    created = await r.read()
    co = json.loads(created)
    r = await client.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    assert r.status == 200 and await r.read() == created


async def test_a_host_with_an_invalid_port_is_refused_and_writes_nothing(client, database, company):
    """Regression (newcomer): a create with ``Host: 127.0.0.1:99999`` was accepted and its
    continue_url and links carried port 99999, while /.well-known/ucp refuses that Host with 400."""
    async with tenant_tx(database.pool, company.id) as conn:
        before = await conn.fetchval("SELECT count(*) FROM checkout_sessions")
    for host in ("127.0.0.1:99999", "127.0.0.1:0", "localhost:65536"):
        h = {**headers(key=new_key()), "Host": host}
        r = await client.post(url("/checkout-sessions"), json=payload(), headers=h)
        body = await r.json()
        assert r.status == 400 and body["code"] == "invalid_request", (host, body)
        r = await client.get("/.well-known/ucp", headers={"Host": host})
        assert r.status == 400  # the same answer as discovery's
    async with tenant_tx(database.pool, company.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM checkout_sessions") == before
    r = await client.post(url("/checkout-sessions"), json=payload(), headers={**headers(key=new_key())})
    assert r.status == 201  # the test client's own Host (127.0.0.1:<port>) is fine


async def test_integral_numbers_are_integers_and_huge_quantities_stay_recoverable(client):
    """JSON Schema 2020-12 (UCP's schemas) counts 2.0 as an integer: it is quantity 2 (it was a 400).
    A quantity beyond any stock is refused with the bound (MAX_QUANTITY), never a 500."""
    r, body = await _create(client, payload(qty=2.0))
    assert r.status == 201 and body["line_items"][0]["quantity"] == 2, body
    assert body["line_items"][0]["totals"][0]["amount"] == 2 * body["line_items"][0]["item"]["price"]
    r, body = await _create(client, payload(qty=2.5))
    assert r.status == 400 and body["code"] == "invalid_request" and "quantity" in body["content"], body
    r, body = await _create(client, payload(qty=10**9))  # as qty=100000 above: more than the stock
    assert r.status == 200 and [m["code"] for m in body["messages"]] == ["out_of_stock"], body
    for qty in (10**9 + 1, 10**30, 1e300):  # 1e300: pydantic said "Unable to parse input string ..."
        r, body = await _create(client, payload(qty=qty))
        assert r.status == 400 and body == {
            "code": "invalid_request",
            "content": "$.line_items.0.quantity: at most 1000000000",
        }


async def test_a_credential_sent_on_create_or_update_is_stored_nowhere(client, database, db_settings, company):
    """Regression (security review): create and update recorded their request body in the
    append-only audit log, so a payment credential riding along (UCP allows instruments on both)
    was kept for ever. Now no table holds it, and the audit rows keep only the arguments' digest."""
    import asyncpg

    secret = "tok_SECRET_CARD_4242"
    body = payload(**pay(token=secret))
    r, created = await _create(client, body)
    assert r.status == 201 and secret not in json.dumps(created), created
    r = await client.put(
        url(f"/checkout-sessions/{created['id']}"),
        json={**payload(), **pay(token=secret + "_2")},
        headers=headers(key=new_key()),
    )
    assert r.status == 200 and secret not in await r.text()
    owner = await asyncpg.connect(db_settings.database_url)
    try:
        tables = [
            r[0]
            for r in await owner.fetch(
                "SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ]
        holding = [
            t
            for t in tables
            if await owner.fetchval(f"SELECT count(*) FROM {t} x WHERE x::text LIKE $1", f"%{secret}%")
        ]
        audit = await owner.fetch(
            "SELECT verb, entry FROM verb_audit_log WHERE verb LIKE 'checkout.%' ORDER BY audit_id"
        )
    finally:
        await owner.close()
    assert holding == []
    assert [a["verb"] for a in audit] == ["checkout.create", "checkout.update"]
    for a in audit:
        entry = json.loads(a["entry"])
        assert "args" not in entry and len(entry["args_digest"]) == 64, entry


async def test_one_idempotency_key_names_one_request_whatever_the_operation(client):
    """Regression (security review): keys were scoped per verb, so create's key sent again on an
    update or a complete executed them. UCP: the same key with a different request is 409."""
    key = new_key()
    r = await client.post(url("/checkout-sessions"), json=payload(), headers=headers(key=key))
    assert r.status == 201
    cid = (await r.json())["id"]
    for method, path, body in (
        ("PUT", f"/checkout-sessions/{cid}", {**payload(qty=2)}),
        ("POST", f"/checkout-sessions/{cid}/complete", pay()),
        ("POST", f"/checkout-sessions/{cid}/cancel", {}),
    ):
        r = await client.request(method, url(path), json=body, headers=headers(key=key))
        assert r.status == 409 and (await r.json())["code"] == "idempotency_key_reused", (method, path)
    r = await client.get(url(f"/checkout-sessions/{cid}"), headers=headers())
    got = await r.json()
    assert got["status"] != "canceled" and got["line_items"][0]["quantity"] == 1, got
    # the first request still replays
    r = await client.post(url("/checkout-sessions"), json=payload(), headers=headers(key=key))
    assert r.status == 201 and r.headers["Idempotent-Replayed"] == "true" and (await r.json())["id"] == cid


async def test_a_read_keeps_its_body_out_of_the_audit_log(client, db_settings):
    """Regression (security review): checkout.get and orders.get still recorded their arguments, and a
    REST GET may carry a body, so whatever a client sent there was kept for ever."""
    import asyncpg

    r, created = await _create(client, payload())
    secret = "GETBODY-4111111111111111"
    r = await client.get(
        url(f"/checkout-sessions/{created['id']}"), data=json.dumps({"note": secret}), headers=headers()
    )
    assert r.status == 200
    owner = await asyncpg.connect(db_settings.database_url)
    try:
        rows = await owner.fetch("SELECT verb, entry::text AS e FROM verb_audit_log WHERE verb = 'checkout.get'")
    finally:
        await owner.close()
    assert rows and all(secret not in row["e"] and '"args":' not in row["e"] for row in rows), rows
    assert all(f'"id": "{created["id"]}"' in row["e"] for row in rows)  # the entity is still recorded


async def test_attribution_is_accepted_on_create_and_update_and_kept_on_the_order(client):
    """UCP checkout ``attribution`` (a map of strings): accepted on create and update, not echoed in
    the checkout (it MUST NOT affect the response), snapshotted on the order. It once raised inside
    validation and was answered 503 ``retry_after`` 1, so a platform retried for ever."""
    attribution = {"utm_source": "gemini", "click_id": "c-123"}
    r, co = await _create(client, payload(fulfillment=SHIP_US, attribution=attribution))
    assert r.status == 201, co
    upd = payload(fulfillment=SHIP_US, attribution={"utm_source": "chatgpt"})
    r = await client.put(url(f"/checkout-sessions/{co['id']}"), json=upd, headers=headers(key=new_key()))
    assert r.status == 200, await r.text()
    r = await client.post(url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers=headers(key=new_key()))
    done = await r.json()
    assert r.status == 200 and done["status"] == "completed", done
    r = await client.get(url(f"/orders/{done['order']['id']}"), headers=headers())
    assert (await r.json())["attribution"] == {"utm_source": "chatgpt"}
    # not a map of strings: a 400 naming the field, never a 503 inviting a retry
    r, err = await _create(client, payload(attribution={"utm_source": 7}))
    assert r.status == 400 and err["code"] == "invalid_request" and "attribution" in err["content"], err
    assert "Retry-After" not in r.headers


async def test_update_whose_body_id_differs_from_the_url_is_400_and_changes_nothing(client):
    """A PUT carrying another checkout's id in its body was accepted silently (the body id dropped)."""
    r, co = await _create(client, payload(fulfillment=SHIP_US))
    r2, other = await _create(client, payload(fulfillment=SHIP_US))
    assert r.status == r2.status == 201
    for bad in (other["id"], "", 7, None):
        upd = dict(payload("pot_ceramic", 3, fulfillment=SHIP_US), id=bad)
        r = await client.put(url(f"/checkout-sessions/{co['id']}"), json=upd, headers=headers(key=new_key()))
        err = await r.json()
        assert r.status == 400 and err["code"] == "invalid_request" and err["content"].startswith("$.id"), err
    r = await client.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    assert (await r.json())["line_items"][0]["item"]["id"] == "bouquet_roses"
    # the same id as the URL (the whole checkout sent back) is fine
    upd = dict(payload("pot_ceramic", 3, fulfillment=SHIP_US), id=co["id"])
    r = await client.put(url(f"/checkout-sessions/{co['id']}"), json=upd, headers=headers(key=new_key()))
    assert r.status == 200 and (await r.json())["line_items"][0]["quantity"] == 3

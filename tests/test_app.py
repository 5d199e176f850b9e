"""The application shell: health, readiness, request ids, error mapping."""

from __future__ import annotations

import asyncpg
import pytest
from aiohttp import web

from ucp_gateway.app import create_app
from ucp_gateway.errors import Conflict


@pytest.fixture
async def client(aiohttp_client, database, db_settings):
    app = create_app(db_settings, database=database)

    async def boom(request):
        raise RuntimeError("secret internals")

    async def conflict(request):
        raise Conflict("already there", code="already_there")

    async def redirect(request):
        raise web.HTTPFound("/healthz")

    app.router.add_get("/_test/boom", boom)
    app.router.add_get("/_test/redirect", redirect)
    app.router.add_get("/_test/conflict", conflict)
    return await aiohttp_client(app)


async def test_healthz_and_readyz(client):
    r = await client.get("/healthz")
    assert r.status == 200 and (await r.json()) == {"status": "ok"}
    r = await client.get("/readyz")
    assert r.status == 200 and (await r.json()) == {"status": "ready"}


async def test_readyz_503_when_migrations_not_current(client, database):
    conn = await asyncpg.connect(database.owner_dsn)
    try:
        await conn.execute("DELETE FROM schema_migrations WHERE version = '0002'")
    finally:
        await conn.close()
    r = await client.get("/readyz")
    assert r.status == 503
    body = await r.json()
    assert body["code"] == "not_ready" and "pending" in body["content"]
    assert r.headers["Retry-After"] == "1"


async def test_request_id_is_echoed_or_generated(client):
    r = await client.get("/healthz", headers={"Request-Id": "abc-123"})
    assert r.headers["Request-Id"] == "abc-123"
    r = await client.get("/healthz", headers={"Request-Id": "bad id\twith junk"})
    assert r.headers["Request-Id"] != "bad id\twith junk" and len(r.headers["Request-Id"]) == 32
    r = await client.get("/healthz")
    assert len(r.headers["Request-Id"]) == 32


async def test_unknown_route_is_json_404(client):
    r = await client.get("/no/such/thing")
    assert r.status == 404
    assert await r.json() == {"code": "not_found", "content": "Not Found"}
    assert "Request-Id" in r.headers


async def test_method_not_allowed_keeps_allow_header(client):
    r = await client.post("/healthz")
    assert r.status == 405
    assert (await r.json())["code"] == "method_not_allowed"
    assert "GET" in r.headers["Allow"]


async def test_unexpected_error_is_generic_500_without_trace(client):
    r = await client.get("/_test/boom")
    assert r.status == 500
    text = await r.text()
    assert "secret internals" not in text and "Traceback" not in text
    assert (await r.json())["code"] == "internal_error"


async def test_gateway_error_maps_to_its_status_and_code(client):
    r = await client.get("/_test/conflict")
    assert r.status == 409
    assert await r.json() == {"code": "already_there", "content": "already there"}


async def test_oversized_body_is_413_json(client):
    r = await client.post("/_test/conflict", data=b"x" * (2 << 20))
    assert r.status in (405, 413)  # method check may win; either way JSON, never a 500
    assert (await r.json())["code"] in ("method_not_allowed", "payload_too_large")


async def test_app_factory_without_database_opens_one(db_settings, aiohttp_client):
    app = create_app(db_settings)
    client = await aiohttp_client(app)
    r = await client.get("/readyz")
    assert r.status == 200
    assert isinstance(app, web.Application)


async def test_every_answer_names_the_gateway_not_the_framework(client):
    """``Server: ucp-gateway`` and ``Request-Id`` on answers, errors and re-raised HTTP exceptions
    alike (set by the foundation layer, not an on_response_prepare receiver)."""
    assert not client.server.app.on_response_prepare  # no per-response signal work
    for method, path, status in (
        ("GET", "/healthz", 200),
        ("GET", "/no/such/thing", 404),
        ("POST", "/healthz", 405),
        ("GET", "/_test/boom", 500),
        ("GET", "/_test/conflict", 409),
        ("GET", "/healthz?x=%00", 400),
        ("GET", "/_test/redirect", 302),  # an HTTP exception < 400: re-raised for aiohttp to send
        ("POST", "/ucp/mcp", 404),  # no company here; rebuilt by the MCP path wrapper as a JSON-RPC error
    ):
        body = b"{" if method == "POST" else None
        r = await client.request(method, path, headers={"Request-Id": "srv-1"}, data=body, allow_redirects=False)
        assert r.status == status, (method, path, await r.text())
        assert r.headers["Server"] == "ucp-gateway" and r.headers["Request-Id"] == "srv-1", (method, path)
        if path == "/ucp/mcp":
            assert (await r.json())["jsonrpc"] == "2.0"


def test_generated_request_ids_are_unique_across_refills():
    from ucp_gateway.middleware import _IDS, _new_request_id

    _IDS.clear()
    ids = [_new_request_id() for _ in range(1000)]  # about four 4 KiB buffers
    assert len(set(ids)) == 1000 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


async def test_json_answers_and_errors_carry_one_content_type(client):
    """Regression: errors rendered with aiohttp's json_response said ``application/json;
    charset=utf-8`` while data said ``application/json`` (RFC 8259 §11 defines no charset)."""
    for path, status in (("/healthz", 200), ("/nope", 404), ("/_test/boom", 500), ("/_test/conflict", 409)):
        r = await client.get(path)
        assert r.status == status and r.headers["Content-Type"] == "application/json", (path, r.headers)
        assert isinstance(await r.json(), dict)

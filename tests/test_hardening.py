"""Regressions from the newcomer review: unknown routes, slow bodies, Host spelling, public manifest."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from ucp_gateway.app import create_app
from ucp_gateway.demo import seed_demo


async def _client(aiohttp_client, database, db_settings, **overrides):
    await seed_demo(database, db_settings)  # flower-shop on 127.0.0.1 / localhost, signatures required
    settings = db_settings.model_copy(update={"webhook_worker": False, **overrides})
    return await aiohttp_client(create_app(settings, database=database))


async def test_unknown_route_on_company_host_is_404_not_signature_error(aiohttp_client, database, db_settings):
    client = await _client(aiohttp_client, database, db_settings)
    r = await client.get("/nope", headers={"Host": "localhost"})
    assert r.status == 404 and (await r.json())["code"] == "not_found"
    # existing routes still demand a signature
    r = await client.get("/ucp/v1/orders/x", headers={"Host": "localhost"})
    assert r.status == 401 and (await r.json())["code"] == "signature_missing"


async def test_verb_manifest_is_public_on_company_host(aiohttp_client, database, db_settings):
    client = await _client(aiohttp_client, database, db_settings)
    r = await client.get("/api/v1/agent/verbs?surface=ucp", headers={"Host": "localhost"})
    assert r.status == 200 and r.headers["Cache-Control"] == "public, max-age=300"


async def test_server_header_names_no_framework(aiohttp_client, database, db_settings):
    client = await _client(aiohttp_client, database, db_settings)
    r = await client.get("/healthz")
    assert r.headers["Server"] == "ucp-gateway"


async def test_profile_urls_use_lower_case_host_and_bad_ports_are_refused(aiohttp_client, database, db_settings):
    client = await _client(aiohttp_client, database, db_settings)
    first = await client.get("/.well-known/ucp", headers={"Host": "LOCALHOST"})
    assert first.status == 200
    text = await (await client.get("/.well-known/ucp", headers={"Host": "localhost"})).text()
    assert "LOCALHOST" not in text and "://localhost/" in text
    r = await client.get("/.well-known/ucp", headers={"Host": "127.0.0.1:99999"})
    assert r.status == 400 and (await r.json())["code"] == "invalid_request"


async def test_short_body_times_out_with_408(aiohttp_server, database, db_settings):
    await seed_demo(database, db_settings)
    settings = db_settings.model_copy(update={"webhook_worker": False, "body_read_timeout": 0.5})
    server = await aiohttp_server(create_app(settings, database=database))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"POST /ucp/v1/checkout-sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{}"
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), timeout=10)
    writer.close()
    assert b" 408 " in status_line


def test_cli_survives_a_closed_pipe(db_settings):
    env = {"DATABASE_URL": db_settings.database_url, "PATH": "/usr/bin:/bin"}
    cmd = f"{sys.executable} -m ucp_gateway.cli demo seed --json | true"
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, env=env, timeout=60)
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr


async def test_a_fully_qualified_host_is_the_company_and_bracketed_garbage_is_refused(
    aiohttp_client, database, db_settings
):
    """Regressions: ``Host: localhost.`` (a name with its root dot, the same host) got 400 although the
    stored name drops the dot; ``Host: [:::::::]`` (no IPv6 address) was echoed into the platform
    document's URLs."""
    client = await _client(aiohttp_client, database, db_settings)
    plain = await client.get("/.well-known/ucp", headers={"Host": "localhost"})
    dotted = await client.get("/.well-known/ucp", headers={"Host": "localhost."})
    assert dotted.status == 200, await dotted.text()
    assert await dotted.json() == await plain.json()  # flower-shop's profile, published as localhost
    r = await client.get("/ucp/v1/orders/x", headers={"Host": "localhost."})
    assert r.status == 401 and (await r.json())["code"] == "signature_missing"  # the company's route
    for garbage in ("[:::::::]", "[1.2.3.4]"):
        r = await client.get("/.well-known/ucp", headers={"Host": garbage})
        assert r.status == 400 and (await r.json())["code"] == "invalid_request", garbage
        assert garbage not in await r.text()

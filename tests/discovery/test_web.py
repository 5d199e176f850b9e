"""``/.well-known/ucp`` hosting, the agent graph and vendor documents through a real aiohttp server."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import jsonschema
import pytest
from aiohttp import web

from ucp_gateway.appkeys import CLOCK, DATABASE, SETTINGS
from ucp_gateway.clock import FrozenClock
from ucp_gateway.discovery import SubagentSummary
from ucp_gateway.discovery.fetcher import ProfileFetcher
from ucp_gateway.discovery.profiles import validate_business_profile, validate_platform_profile
from ucp_gateway.discovery.web import KEYS_PROVIDER, PROFILE_FETCHER, SUBAGENT_PROVIDER, setup
from ucp_gateway.tenancy import SUBAGENTS, create_company

from .conftest import new_jwk

KEYS = [new_jwk("pending-1"), new_jwk("active-1"), new_jwk("rotating-1")]


def make_app(database, settings, **providers) -> web.Application:
    app = web.Application()
    app[SETTINGS] = settings
    app[CLOCK] = FrozenClock()
    app[DATABASE] = database
    for key, value in providers.items():
        app[{"keys": KEYS_PROVIDER, "subagents": SUBAGENT_PROVIDER}[key]] = value
    setup(app)
    return app


async def published(pool, company_id):
    return KEYS


async def summary(company, name):
    return SubagentSummary(
        verb_count=42,
        risk_classes=("READ", "WRITE", "DESTRUCTIVE"),
        role_floors=("read_only", "employee", "admin"),
    )


@pytest.fixture
async def demo(database):
    return await create_company(
        database.pool, slug="demo-flowers", display_name="Demo Flower Shop", hostnames=["shop.test"]
    )


@pytest.fixture
async def client(aiohttp_client, database, db_settings, demo):
    return await aiohttp_client(make_app(database, db_settings, keys=published, subagents=summary))


async def test_company_profile_hosting_rules_and_models(client) -> None:
    resp = await client.get("/.well-known/ucp", headers={"Host": "shop.test"}, allow_redirects=False)
    assert resp.status == 200
    cc = resp.headers["Cache-Control"]
    assert "public" in cc and int(cc.split("max-age=")[1]) >= 60
    assert not any(bad in cc for bad in ("private", "no-store", "no-cache"))
    etag = resp.headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    body = await resp.read()
    doc = json.loads(body)
    validate_business_profile(doc)  # ucp-sdk BusinessSchema
    validate_platform_profile(doc)  # and the stricter platform variant (spec/schema everywhere)
    caps = doc["ucp"]["capabilities"]
    for name in ("checkout", "fulfillment", "discount", "buyer_consent", "order"):
        assert f"dev.ucp.shopping.{name}" in caps
    for sub in SUBAGENTS:
        entry = caps[f"com.solidnumber.{sub}"][0]
        assert entry["spec"].startswith("https://solidnumber.com/ucp/")
        assert entry["config"]["verb_count"] == 42
        assert entry["config"]["role_floors"] == ["admin", "employee", "read_only"]
        assert entry["config"]["manifest"].startswith("https://shop.test/")
    assert [k["kid"] for k in doc["signing_keys"]] == ["pending-1", "active-1", "rotating-1"]
    assert doc["keys"] == doc["signing_keys"]
    assert doc["ucp"]["payment_handlers"]["com.solidnumber.mock_payment"][0]["id"] == "mock_payment_handler"
    assert len(body) < 8 * 1024, len(body)


async def test_if_none_match_gives_304(client) -> None:
    first = await client.get("/.well-known/ucp", headers={"Host": "shop.test"})
    etag = first.headers["ETag"]
    again = await client.get("/.well-known/ucp", headers={"Host": "shop.test", "If-None-Match": etag})
    assert again.status == 304
    assert await again.read() == b""
    assert again.headers["ETag"] == etag and "max-age" in again.headers["Cache-Control"]
    weak = await client.get("/.well-known/ucp", headers={"Host": "shop.test", "If-None-Match": f'"x", W/{etag}'})
    assert weak.status == 304
    other = await client.get("/.well-known/ucp", headers={"Host": "shop.test", "If-None-Match": '"other"'})
    assert other.status == 200


async def test_never_redirects(client) -> None:
    for path in ("/.well-known/ucp/", "/.well-known//ucp", "/.well-known/UCP"):
        resp = await client.get(path, headers={"Host": "shop.test"}, allow_redirects=False)
        assert not 300 <= resp.status < 400


async def test_disabled_subagent_is_not_listed(aiohttp_client, database, db_settings) -> None:
    await create_company(
        database.pool,
        slug="small",
        display_name="Small",
        hostnames=["small.test"],
        subagents={"ap": False, "ops": False},
    )
    client = await aiohttp_client(make_app(database, db_settings))
    doc = await (await client.get("/.well-known/ucp", headers={"Host": "small.test"})).json()
    caps = doc["ucp"]["capabilities"]
    assert "com.solidnumber.ap" not in caps and "com.solidnumber.ops" not in caps
    assert caps["com.solidnumber.sales"][0]["config"]["verb_count"] == 0  # default provider
    assert doc["signing_keys"] == []  # default keys provider until keys are wired


async def test_platform_node_and_paginated_agent_graph(aiohttp_client, database, db_settings, demo) -> None:
    for i in range(6):
        await create_company(database.pool, slug=f"co-{i}", display_name=f"Company {i}", hostnames=[f"co{i}.test"])
    await create_company(database.pool, slug="nohost", display_name="No Host")
    settings = db_settings.model_copy(update={"agent_graph_page_size": 3})
    client = await aiohttp_client(make_app(database, settings))
    resp = await client.get("/.well-known/ucp", headers={"Host": "platform.test"})
    assert resp.status == 200 and "max-age" in resp.headers["Cache-Control"]
    doc = await resp.json()
    validate_business_profile(doc)
    validate_platform_profile(doc)
    graph = doc["ucp"]["capabilities"]["com.solidnumber.agent_graph"][0]["config"]
    seen = [c["slug"] for c in graph["companies"]]
    assert graph["companies"][0] == {
        "slug": "co-0",
        "name": "Company 0",
        "profile": "https://co0.test/.well-known/ucp",
    }
    next_url = graph["next"]
    pages = 1
    while next_url:
        path = next_url.split("platform.test", 1)[1]
        page = await (await client.get(path, headers={"Host": "platform.test"})).json()
        seen += [c["slug"] for c in page["companies"]]
        next_url = page["next"]
        pages += 1
    assert seen == sorted(["demo-flowers", "nohost"] + [f"co-{i}" for i in range(6)])
    assert pages == 3
    bad = await client.get("/ucp/agent-graph?cursor=%%%", headers={"Host": "platform.test"})
    assert bad.status == 400 and (await bad.json())["code"] == "invalid_cursor"
    # regression: "AAAA" decodes to NUL bytes, which reached PostgreSQL and answered 500
    for junk in ("AAAA", "_w", "QQ"):  # NUL bytes, a non-UTF-8 byte, "A" (not a slug: upper case)
        bad = await client.get(f"/ucp/agent-graph?cursor={junk}", headers={"Host": "platform.test"})
        assert bad.status == 400 and (await bad.json())["code"] == "invalid_cursor", junk


async def test_a_company_can_opt_out_of_the_platform_listing(aiohttp_client, database, db_settings) -> None:
    """``settings.platform_listing: false`` keeps a company out of the agent graph (a bad value too:
    unlisted is the safe reading); its own profile is still served on its host."""
    from ucp_gateway.db import tenant_tx

    for slug, listing in (("listed", None), ("hidden", False), ("garbled", None)):
        s = {} if listing is None else {"platform_listing": listing}
        c = await create_company(database.pool, slug=slug, display_name=slug, hostnames=[f"{slug}.test"], settings=s)
    async with tenant_tx(database.pool, c.id) as conn:  # an operator's SQL: the write paths refuse it
        await conn.execute("""UPDATE companies SET settings = '{"platform_listing": "no"}'::jsonb""")
    client = await aiohttp_client(make_app(database, db_settings))
    doc = await (await client.get("/.well-known/ucp", headers={"Host": "platform.test"})).json()
    graph = doc["ucp"]["capabilities"]["com.solidnumber.agent_graph"][0]["config"]
    assert [c["slug"] for c in graph["companies"]] == ["listed"]
    assert (await client.get("/.well-known/ucp", headers={"Host": "hidden.test"})).status == 200


async def test_vendor_documents_are_served_and_describe_the_config(client) -> None:
    doc = await (await client.get("/.well-known/ucp", headers={"Host": "shop.test"})).json()
    entry = doc["ucp"]["capabilities"]["com.solidnumber.sales"][0]
    schema_path = entry["schema"].split("solidnumber.com", 1)[1]
    spec_path = entry["spec"].split("solidnumber.com", 1)[1]
    schema_resp = await client.get(schema_path)
    assert schema_resp.status == 200 and "max-age" in schema_resp.headers["Cache-Control"]
    schema = json.loads(await schema_resp.read())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == entry["schema"]
    jsonschema.validate(entry["config"], schema["$defs"]["config"])
    spec = await client.get(spec_path)
    assert spec.status == 200 and "com.solidnumber.sales" in await spec.text()
    assert (await client.get(schema_path, headers={"If-None-Match": schema_resp.headers["ETag"]})).status == 304
    assert (await client.get("/ucp/schemas/unknown.json")).status == 404


async def test_plain_client_finds_rest_endpoint_and_keys_from_origin(database, db_settings) -> None:
    """Given only the origin, a plain UCP client reaches /.well-known/ucp over a real socket."""
    await create_company(database.pool, slug="loop", display_name="Loop", hostnames=["127.0.0.1"])
    app = make_app(database, db_settings.model_copy(update={"public_scheme": "http"}), keys=published)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    origin = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.get(origin + "/.well-known/ucp", allow_redirects=False) as r,
        ):
            assert r.status == 200
            doc = await r.json()
        rest = [b for b in doc["ucp"]["services"]["dev.ucp.shopping"] if b["transport"] == "rest"]
        assert rest[0]["endpoint"] == origin + "/ucp/v1"
        assert {k["kid"] for k in doc["signing_keys"]} == {"pending-1", "active-1", "rotating-1"}
        assert isinstance(app[PROFILE_FETCHER], ProfileFetcher)
    finally:
        await runner.cleanup()


def test_production_refuses_unbound_vendor_namespace(db_settings) -> None:
    from ucp_gateway.errors import ConfigError

    app = web.Application()
    app[SETTINGS] = db_settings.model_copy(
        update={"environment": "production", "vendor_base_url": "https://example.org/ucp"}
    )
    with pytest.raises(ConfigError, match="not bound"):
        setup(app)
    ok = web.Application()
    ok[SETTINGS] = db_settings.model_copy(
        update={
            "environment": "production",
            "vendor_prefix": "org.example",
            "vendor_base_url": "https://docs.example.org/ucp",
        }
    )
    with pytest.raises(ConfigError):
        setup(ok)  # docs.example.org binds org.example.docs, not org.example
    good = web.Application()
    good[SETTINGS] = db_settings.model_copy(
        update={
            "environment": "production",
            "vendor_prefix": "org.example.docs",
            "vendor_base_url": "https://docs.example.org/ucp",
        }
    )
    setup(good)


async def test_render_is_single_flight_and_refreshes_after_ttl(aiohttp_client, database, db_settings, demo) -> None:
    calls = 0
    keys = [new_jwk("old")]

    async def counting(pool, company_id):
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return list(keys)

    settings = db_settings.model_copy(update={"profile_render_ttl": 0.2})
    client = await aiohttp_client(make_app(database, settings, keys=counting))
    resps = await asyncio.gather(*(client.get("/.well-known/ucp", headers={"Host": "shop.test"}) for _ in range(50)))
    bodies = {await r.read() for r in resps}
    assert len(bodies) == 1 and calls == 1
    keys[:] = [new_jwk("new")]
    await asyncio.sleep(0.25)
    stale = await (await client.get("/.well-known/ucp", headers={"Host": "shop.test"})).json()
    assert [k["kid"] for k in stale["signing_keys"]] == ["old"]  # served while one refresh runs
    await asyncio.sleep(0.2)
    fresh = await client.get("/.well-known/ucp", headers={"Host": "shop.test"})
    assert [k["kid"] for k in (await fresh.json())["signing_keys"]] == ["new"]
    assert calls == 2
    assert fresh.headers["ETag"] != resps[0].headers["ETag"]


async def test_odd_host_headers_are_refused(client) -> None:
    for host in ("evil.example/path", "a b", "x" * 300, "[::1", "shop.test:99999999"):
        resp = await client.get("/.well-known/ucp", headers={"Host": host})
        assert resp.status == 400, host
    # a valid Host of no company and not the platform's: not refused as odd, just nobody's (404)
    resp = await client.get("/.well-known/ucp", headers={"Host": "[::1]:8080"})
    assert resp.status == 404 and (await resp.json())["code"] == "not_found"


async def test_agent_graph_links_keep_the_public_port(aiohttp_client, database, db_settings, demo) -> None:
    """Regression: on ``serve --demo --port 8182`` the agent graph linked companies at port 80. The
    ports come from the configuration, never from the request's Host."""
    # a configured public port, also when the Host header carries none (what the demo sets)
    settings = db_settings.model_copy(update={"public_scheme": "http", "public_port": 8182})
    client = await aiohttp_client(make_app(database, settings))
    for host in ("platform.test", "platform.test:9999"):
        doc = await (await client.get("/.well-known/ucp", headers={"Host": host})).json()
        graph = doc["ucp"]["capabilities"]["com.solidnumber.agent_graph"][0]["config"]
        profile = next(c["profile"] for c in graph["companies"] if c["slug"] == "demo-flowers")
        assert profile == "http://shop.test:8182/.well-known/ucp", host
        assert graph["pages"] == "http://platform.test:8182/ucp/agent-graph", host
    page = await (await client.get("/ucp/agent-graph", headers={"Host": "platform.test:9999"})).json()
    assert "http://shop.test:8182/.well-known/ucp" in [c.get("profile") for c in page["companies"]]
    company = await (await client.get("/.well-known/ucp", headers={"Host": "shop.test"})).json()
    rest = company["ucp"]["services"]["dev.ucp.shopping"][0]
    assert rest["endpoint"] == "http://shop.test:8182/ucp/v1"
    # no public port: the platform origin's own port (the companies are served beside it), not the Host's
    settings = db_settings.model_copy(update={"public_scheme": "http", "platform_origin": "http://platform.test:8443"})
    client = await aiohttp_client(make_app(database, settings))
    doc = await (await client.get("/.well-known/ucp", headers={"Host": "platform.test:8182"})).json()
    graph = doc["ucp"]["capabilities"]["com.solidnumber.agent_graph"][0]["config"]
    assert "http://shop.test:8443/.well-known/ucp" in [c.get("profile") for c in graph["companies"]]
    assert graph["pages"] == "http://platform.test:8443/ucp/agent-graph"
    # the scheme's default port is never written
    settings = db_settings.model_copy(update={"public_scheme": "https", "public_port": 443})
    client = await aiohttp_client(make_app(database, settings))
    doc = await (await client.get("/.well-known/ucp", headers={"Host": "platform.test:443"})).json()
    graph = doc["ucp"]["capabilities"]["com.solidnumber.agent_graph"][0]["config"]
    assert "https://shop.test/.well-known/ucp" in [c.get("profile") for c in graph["companies"]]
    assert graph["pages"] == "https://platform.test/ucp/agent-graph"


@pytest.mark.parametrize("ttl", [60.0, 0.0])
async def test_a_new_host_spelling_does_not_read_the_directory_again(aiohttp_client, database, db_settings, ttl):
    """Regression (DoS): the platform document is rendered per Host spelling, and each render read the
    directory, so naming a new Host on every request made every request a directory read. The
    directory page is now reused for profile_render_ttl: a company created meanwhile shows up only
    after it (with ttl 0, at once), whatever Host is named."""
    await create_company(database.pool, slug="first", display_name="First", hostnames=["first.test"])
    settings = db_settings.model_copy(update={"profile_render_ttl": ttl})
    client = await aiohttp_client(make_app(database, settings))

    async def listed(host: str) -> list[str]:
        doc = await (await client.get("/.well-known/ucp", headers={"Host": host})).json()
        return [c["slug"] for c in doc["ucp"]["capabilities"]["com.solidnumber.agent_graph"][0]["config"]["companies"]]

    assert await listed("platform.test") == ["first"]
    await create_company(database.pool, slug="second", display_name="Second", hostnames=["second.test"])
    assert await listed("PLATFORM.test:8080") == (["first"] if ttl else ["first", "second"])

"""Discovery inside the real app (create_app): the signature middleware resolves caller keys through
the profile fetcher, and the company profile publishes the keys package's keys."""

from __future__ import annotations

from aiohttp import web
from pydantic import SecretStr

from ucp_gateway.app import create_app
from ucp_gateway.appkeys import REQ_PRINCIPAL
from ucp_gateway.clock import FrozenClock
from ucp_gateway.discovery.profiles import validate_business_profile
from ucp_gateway.discovery.web import PROFILE_FETCHER
from ucp_gateway.httpsig import REQ_SIGNATURE
from ucp_gateway.httpsig.web import KEY_RESOLVER
from ucp_gateway.keys import KekRing, Vault, ensure_active_key
from ucp_gateway.tenancy import create_company

from ..httpsig.signer import new_key, sign_request

BODY = b'{"line_items": []}'


async def echo(request: web.Request) -> web.Response:
    sig = request.get(REQ_SIGNATURE)
    return web.json_response({"kid": sig.kid if sig else None, "role": request[REQ_PRINCIPAL].role})


async def test_signed_request_verified_with_fetched_profile_and_keys_published(
    aiohttp_client, database, db_settings, platform_server
) -> None:
    ring = KekRing.new_entry("kek-1")
    settings = db_settings.model_copy(
        update={"kek_ring": SecretStr(ring), "dev_profile_hosts": ["127.0.0.1"], "public_scheme": "https"}
    )
    clock = FrozenClock()
    company = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["shop.example"])
    kid = await ensure_active_key(database.pool, company.id, now=clock.now(), vault=Vault(KekRing.parse(ring)))
    priv, jwk = new_key("platform-2026")
    platform_server.keys = [jwk]
    app = create_app(settings, clock=clock, database=database)
    app.router.add_post("/checkout-sessions", echo)
    assert app[KEY_RESOLVER] is app[PROFILE_FETCHER]
    client = await aiohttp_client(app)

    headers = sign_request(priv, profile=platform_server.url(), body=BODY, created=int(clock.now().timestamp()))
    resp = await client.post("/checkout-sessions", headers=[("Host", "shop.example"), *headers], data=BODY)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["kid"] == "platform-2026"
    assert app[PROFILE_FETCHER].fetch_count == 1 and platform_server.count() == 1

    prof = await client.get("/.well-known/ucp", headers={"Host": "shop.example"})
    assert prof.status == 200
    doc = await prof.json()
    validate_business_profile(doc)
    assert [k["kid"] for k in doc["signing_keys"]] == [kid]
    assert "d" not in doc["signing_keys"][0]


async def test_demo_company_and_platform_node_validate(aiohttp_client, database, db_settings) -> None:
    from ucp_gateway.demo import DEMO_SLUG, seed_demo
    from ucp_gateway.discovery.profiles import validate_platform_profile
    from ucp_gateway.keys import rotate
    from ucp_gateway.tenancy import get_company

    ring = KekRing.new_entry("kek-1")
    settings = db_settings.model_copy(update={"kek_ring": SecretStr(ring)})
    await seed_demo(database, settings)
    demo = await get_company(database.pool, DEMO_SLUG)
    vault, clock = Vault(KekRing.parse(ring)), FrozenClock()
    await ensure_active_key(database.pool, demo.id, now=clock.now(), vault=vault)
    await rotate(database.pool, demo.id, actor="test", reason="size check", now=clock.now(), vault=vault)
    client = await aiohttp_client(create_app(settings, clock=clock, database=database))

    resp = await client.get("/.well-known/ucp", headers={"Host": "localhost:8080"})
    body = await resp.read()
    doc = await resp.json()
    validate_business_profile(doc)
    validate_platform_profile(doc)
    assert len(doc["signing_keys"]) == 2  # active + pending
    assert doc["ucp"]["services"]["dev.ucp.shopping"][0]["endpoint"] == "https://localhost:8080/ucp/v1"
    assert len(body) < 8 * 1024, len(body)

    node = await client.get("/.well-known/ucp", headers={"Host": "platform.test"})
    graph = await node.json()
    validate_business_profile(graph)
    validate_platform_profile(graph)
    [entry] = graph["ucp"]["capabilities"]["com.solidnumber.agent_graph"]
    assert entry["config"]["companies"][0]["slug"] == DEMO_SLUG
    assert entry["config"]["companies"][0]["profile"] == "https://127.0.0.1/.well-known/ucp"


async def test_allowlist_refuses_before_signature_check_and_partner_role_is_set(
    aiohttp_client, database, db_settings, platform_server
) -> None:
    from ucp_gateway.discovery.partners import add_partner, set_policy
    from ucp_gateway.discovery.trust import REQ_AGENT_ROLE

    async def whoami(request: web.Request) -> web.Response:
        role = request.get(REQ_AGENT_ROLE)
        return web.json_response({"role": role.role if role else None, "partner": role.partner if role else None})

    ring = KekRing.new_entry("kek-1")
    settings = db_settings.model_copy(
        update={"kek_ring": SecretStr(ring), "dev_profile_hosts": ["127.0.0.1"], "partner_cache_ttl": 0.0}
    )
    clock = FrozenClock()
    company = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["shop.example"])
    await ensure_active_key(database.pool, company.id, now=clock.now(), vault=Vault(KekRing.parse(ring)))
    priv, jwk = new_key("platform-2026")
    platform_server.keys = [jwk]
    app = create_app(settings, clock=clock, database=database)
    app.router.add_post("/checkout-sessions", whoami)
    client = await aiohttp_client(app)

    async def call():
        hdrs = sign_request(priv, profile=platform_server.url(), body=BODY, created=int(clock.now().timestamp()))
        return await client.post("/checkout-sessions", headers=[("Host", "shop.example"), *hdrs], data=BODY)

    resp = await call()
    assert resp.status == 200 and await resp.json() == {"role": "read_only", "partner": False}
    await set_policy(database.pool, company.id, trust_mode="allowlist")
    fetches = platform_server.count()
    app[PROFILE_FETCHER]._flights.entries.clear()  # an uncached profile: refusal must come before any fetch
    resp = await call()
    assert resp.status == 403 and (await resp.json())["code"] == "profile_not_trusted"
    assert platform_server.count() == fetches
    await add_partner(
        database.pool,
        company.id,
        profile_url=platform_server.url(),
        role="employee",
        http_hosts=frozenset({"127.0.0.1"}),
    )
    resp = await call()
    assert resp.status == 200 and await resp.json() == {"role": "employee", "partner": True}
    bad = await client.post("/checkout-sessions", headers={"Host": "shop.example", "UCP-Agent": "profile=x"})
    assert bad.status == 400 and (await bad.json())["code"] == "invalid_profile_url"


async def test_vendor_documents_and_agent_graph_are_public_on_a_company_host(
    aiohttp_client, database, db_settings
) -> None:
    # regression: the spec/schema URLs a company profile advertises answered 401 signature_missing there
    await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["shop.example"])
    client = await aiohttp_client(create_app(db_settings, clock=FrozenClock(), database=database))
    host = {"Host": "shop.example"}
    doc = await (await client.get("/.well-known/ucp", headers=host)).json()
    urls = [
        e[k].split("solidnumber.com", 1)[1]
        for name, entries in doc["ucp"]["capabilities"].items()
        if name.startswith("com.solidnumber.")
        for e in entries
        for k in ("spec", "schema")
    ]
    assert "/ucp/specification/ap" in urls and "/ucp/schemas/ap.json" in urls
    for path in urls:
        resp = await client.get(path, headers=host)
        assert resp.status == 200, (path, resp.status, await resp.text())
    # the agent graph is the platform's document: on its hosts only (a JSON 404, not a 401, here)
    resp = await client.get("/ucp/agent-graph", headers=host)
    assert resp.status == 404 and (await resp.json())["code"] == "not_found"
    # everything else on the company host is still signed, also when reached through an exempt prefix
    for path in ("/ucp/v1/checkout-sessions", "/ucp/specification/../v1/checkout-sessions"):
        resp = await client.post(path, headers=host, json={"line_items": []})
        assert resp.status == 401 and (await resp.json())["code"] == "signature_missing", path

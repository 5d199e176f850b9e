"""Companies, hostnames and Host -> company resolution."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from ucp_gateway.app import create_app
from ucp_gateway.db import tenant_tx
from ucp_gateway.errors import BadRequest, Conflict
from ucp_gateway.hostcache import HostCache
from ucp_gateway.tenancy import (
    SUBAGENTS,
    CompanyMisconfigured,
    CompanyNotFound,
    create_company,
    get_company,
    list_companies,
    list_subagents,
    normalize_host,
    public_origin,
    resolve_host,
    valid_host_header,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Shop.Example.COM", "shop.example.com"),
        ("shop.example.com:8443", "shop.example.com"),
        ("shop.example.com.", "shop.example.com"),
        ("127.0.0.1:8080", "127.0.0.1"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("[0:0:0:0:0:0:0:1]:8080", "::1"),  # one address, one host: the compressed form
        ("[2001:DB8:0:0::A]", "2001:db8::a"),
        ("[not:an:address]", "not:an:address"),  # left as it is: it matches no stored host
        ("", ""),
        (None, ""),
    ],
)
def test_normalize_host(raw, expected):
    assert normalize_host(raw) == expected


async def test_host_resolution_is_case_insensitive_and_ignores_port(database):
    c = await create_company(database.pool, slug="shop", display_name="Shop", hostnames=["Shop.Example"])
    for host in ("shop.example", "SHOP.example:8080", "shop.example."):
        got = await resolve_host(database.pool, host)
        assert got is not None and got.id == c.id and got.hostnames == ("shop.example",)
    assert await resolve_host(database.pool, "other.example") is None  # platform node
    assert await resolve_host(database.pool, None) is None


async def test_create_company_creates_all_subagents(database):
    c = await create_company(
        database.pool, slug="acme", display_name="Acme", subagents={"marketing": False}, tier="pro"
    )
    subs = await list_subagents(database.pool, c.id)
    assert set(subs) == set(SUBAGENTS)
    assert subs["marketing"] is False and subs["sales"] is True
    assert (await get_company(database.pool, "acme")).tier == "pro"
    assert (await get_company(database.pool, str(c.id))).slug == "acme"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"slug": "Bad Slug"},
        {"slug": "-x"},
        {"display_name": "   "},
        {"tier": "platinum"},
        {"signature_policy": "maybe"},
        {"hostnames": ["bad host!"]},
        {"hostnames": ["a:b"]},
        {"hostnames": ["shop:80"]},
        {"hostnames": ["[::1]:8080"]},
        {"hostnames": ["1:2:3"]},
        {"hostnames": ["fe80::1%eth0"]},
        {"hostnames": ["::ffff:192.0.2.1"]},
        {"hostnames": ["[shop.example]"]},
        {"subagents": {"hr": True}},
    ],
)
async def test_invalid_company_fields_are_rejected_and_nothing_written(database, kwargs):
    args = {"slug": "ok", "display_name": "Ok"} | kwargs
    with pytest.raises(BadRequest):
        await create_company(database.pool, **args)
    assert await list_companies(database.pool) == []


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (["sign_responses"], "settings must be a JSON object, not a JSON array"),
        ({"sign_responses": "yes"}, "settings.sign_responses must be true or false, not 'yes'"),
        ({"verbs": "x"}, "settings.verbs must be a JSON object, not 'x'"),
        ({"verbs": {"daily_caps": 5}}, "settings.verbs.daily_caps must be a JSON object, not 5"),
        (
            {"verbs": {"daily_caps": {"WRITE_FINANCIAL": "5"}}},
            "settings.verbs.daily_caps.WRITE_FINANCIAL must be an integer from 0 to 2147483647 or null, not '5'",
        ),
        (  # regression (security review): accepted, then every capped call failed on the int4 counter
            {"verbs": {"daily_caps": {"WRITE_REVERSIBLE": 2**31}}},
            "settings.verbs.daily_caps.WRITE_REVERSIBLE must be an integer from 0 to 2147483647 or null,"
            " not 2147483648",
        ),
        ({"verbs": {"daily_caps": {"IRREVERSIBLE": -1}}}, "settings.verbs.daily_caps.IRREVERSIBLE must be an integer"),
        ({"commerce": []}, "settings.commerce must be a JSON object, not a JSON array"),
        ({"commerce": {"currency": "usd"}}, "settings.commerce.currency must be an ISO 4217 currency code"),
        ({"commerce": {"buyer_max_order_amount": 1.5}}, "settings.commerce.buyer_max_order_amount must be an"),
        ({"commerce": {"automatic_discounts": [{}]}}, "settings.commerce.automatic_discounts[0].id must be a string"),
        ({"commerce": {"pickup_locations": {"id": "p"}}}, "settings.commerce.pickup_locations must be a JSON array"),
        ({"commerce": {"pages": "text"}}, "settings.commerce.pages must be a JSON object, not 'text'"),
        ({"commerce": {"pages": {"terms": True}}}, "settings.commerce.pages.terms must be a string, not true"),
    ],
)
async def test_settings_of_the_wrong_type_are_a_clear_bad_request_and_nothing_written(database, settings, says):
    with pytest.raises(BadRequest) as e:
        await create_company(database.pool, slug="ok", display_name="Ok", hostnames=["ok.example"], settings=settings)
    assert e.value.message.startswith(says) and e.value.http_status == 400 and e.value.code == "invalid_request"
    assert await list_companies(database.pool) == []
    assert await resolve_host(database.pool, "ok.example") is None


async def test_settings_of_the_known_types_and_free_form_keys_are_written(database):
    settings = {
        "sign_responses": False,
        "verbs": {"daily_caps": {"WRITE_FINANCIAL": 5, "IRREVERSIBLE": None, "refunds": 0}, "other": "x"},
        "commerce": {"currency": "EUR", "buyer_max_order_amount": None, "pages": {"terms": "T", "privacy": None}},
        "vendor": [1, "free-form"],
    }
    c = await create_company(database.pool, slug="ok", display_name="Ok", settings=settings)
    assert c.settings == settings and (await get_company(database.pool, "ok")).settings == settings


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("shop:80", "invalid hostname 'shop:80': give the host without a port"),
        ("a:b", "invalid hostname 'a:b': neither a host name nor an IPv6 address"),
        # newcomer: a Unicode name was refused without saying what to give instead
        ("Bücher.example", "invalid hostname 'Bücher.example': give its ASCII (IDNA) form, xn--bcher-kva.example"),
        ("☃☃☃\u0000.example", "invalid hostname '☃☃☃\\x00.example'"),
    ],
)
async def test_a_port_or_a_colon_that_is_no_ipv6_is_a_clear_bad_request(database, host, says):
    with pytest.raises(BadRequest) as e:
        await create_company(database.pool, slug="ok", display_name="Ok", hostnames=[host])
    assert e.value.message == says


@pytest.mark.parametrize(
    "host",
    [
        "a..b",
        "a.-b.example",
        "b-.example",
        "-lead.example",
        "1.2.3",
        "999.1.1.1",
        "2130706433",
        "0x7f.0.0.1",
        "127.000.000.001",
        "shop.123",
        "x" * 64 + ".example",
        "::",
    ],
)
async def test_malformed_names_and_other_spellings_of_an_address_are_refused(database, host):
    """Regression (newcomer): empty or hyphen-edged labels, an all-digit last label that is no
    dotted-quad IPv4, other spellings of an IPv4 address (one address, one host) and ``::`` were bound."""
    with pytest.raises(BadRequest) as e:
        await create_company(database.pool, slug="ok", display_name="Ok", hostnames=[host])
    assert e.value.message.startswith(f"invalid hostname {host!r}")
    assert await list_companies(database.pool) == []


async def test_ordinary_names_and_dotted_quads_are_bound(database):
    hosts = ["localhost", "shop-1.example", "xn--bcher-kva.example", "10.0.0.7", "a" * 63 + ".example"]
    company = await create_company(database.pool, slug="ok", display_name="Ok", hostnames=hosts)
    assert set(company.hostnames) == set(hosts)


async def test_ipv6_hostnames_are_stored_compressed_and_resolve_from_any_spelling(database):
    c = await create_company(
        database.pool, slug="v6", display_name="V6", hostnames=["::1", "0:0:0:0:0:0:0:1", "[2001:DB8:0:0::A]"]
    )
    assert c.hostnames == ("2001:db8::a", "::1")  # one host per address, unbracketed
    assert (await get_company(database.pool, "v6")).hostnames == c.hostnames
    for host in ("[::1]:8080", "[0::1]", "::1", "[2001:db8::a]:443", "[2001:db8:0:0:0:0:0:a]"):
        got = await resolve_host(database.pool, host)
        assert got is not None and got.id == c.id, host
    with pytest.raises(Conflict):  # the same address spelled differently is taken
        await create_company(database.pool, slug="other", display_name="Other", hostnames=["0::0:1"])


async def test_the_database_refuses_a_port_and_takes_an_ipv6_literal(database):
    c = await create_company(database.pool, slug="db", display_name="Db")
    for bad in ("shop:80", "a:b", "[::1]", "shop.example:8443", "::1:x", "Shop.example", ""):
        with pytest.raises(asyncpg.CheckViolationError):
            async with tenant_tx(database.pool, c.id) as conn:
                await conn.execute("INSERT INTO company_hosts (hostname, company_id) VALUES ($1, $2)", bad, c.id)
    async with tenant_tx(database.pool, c.id) as conn:
        for good in ("::1", "fe80::1", "2001:db8::a", "::ffff:192.0.2.1", "shop.example", "192.0.2.1"):
            await conn.execute("INSERT INTO company_hosts (hostname, company_id) VALUES ($1, $2)", good, c.id)
    for settings in ('"x"', "[]", "null", "1"):
        with pytest.raises(asyncpg.CheckViolationError):
            async with tenant_tx(database.pool, c.id) as conn:
                await conn.execute("UPDATE companies SET settings = $1::text::jsonb WHERE id = $2", settings, c.id)


async def _break_settings(db_settings, company_id, value: str) -> None:
    """What an operator's SQL left on a database older than migration 0057 (its CHECK NOT VALID)."""
    owner = await asyncpg.connect(db_settings.database_url)
    try:
        async with owner.transaction():
            await owner.execute("ALTER TABLE companies DROP CONSTRAINT companies_settings_object")
            await owner.execute("UPDATE companies SET settings = $1::jsonb WHERE id = $2", value, company_id)
            await owner.execute(
                "ALTER TABLE companies ADD CONSTRAINT companies_settings_object"
                " CHECK (jsonb_typeof(settings) = 'object') NOT VALID"
            )
    finally:
        await owner.close()


@pytest.mark.parametrize("value", ['"oops"', "[]", '[["sign_responses", true]]', "42", "null"])
async def test_settings_that_are_no_json_object_fail_closed_with_a_json_error(
    aiohttp_client, database, db_settings, value
):
    odd = await create_company(database.pool, slug="odd", display_name="Odd", hostnames=["odd.example"])
    await create_company(database.pool, slug="fine", display_name="Fine", hostnames=["fine.example"])
    await _break_settings(db_settings, odd.id, value)
    settings = db_settings.model_copy(update={"webhook_worker": False})
    client = await aiohttp_client(create_app(settings, database=database))
    for path in ("/.well-known/ucp", "/ucp/v1/checkout-sessions/x"):
        r = await client.get(path, headers={"Host": "odd.example"})
        assert r.status == 500 and r.content_type == "application/json", path
        body = await r.json()
        assert body["code"] == "company_misconfigured" and "'odd'" in body["content"], body
    with pytest.raises(CompanyMisconfigured):
        await get_company(database.pool, "odd")
    # the other tenants and the directory (agent graph, key rotation) go on
    assert (await client.get("/.well-known/ucp", headers={"Host": "fine.example"})).status == 200
    assert (await client.get("/.well-known/ucp", headers={"Host": "platform.test"})).status == 200
    assert [(c.slug, c.settings) for c in await list_companies(database.pool)] == [("fine", {}), ("odd", {})]


async def test_a_bad_row_is_logged_once_per_window_by_directory_listings(database, db_settings, monkeypatch):
    """Regression: every directory listing (the public agent graph on the platform host, each
    scheduler round) logged company_settings_invalid again, a line per anonymous request."""
    from structlog.testing import capture_logs

    from ucp_gateway import tenancy

    odd = await create_company(database.pool, slug="odd", display_name="Odd", hostnames=["odd.example"])
    await _break_settings(db_settings, odd.id, "[]")
    monkeypatch.setattr(tenancy, "_listed_logged", {})
    with capture_logs() as logs:
        for _ in range(3):
            assert [c.slug for c in await list_companies(database.pool)] == ["odd"]
    assert [(e["event"], e["slug"], e["json_type"]) for e in logs] == [("company_settings_invalid", "odd", "array")]
    # the window passes: logged again; serving it is logged every time (each request is refused)
    tenancy._listed_logged[(odd.id, "array")] -= tenancy._LISTED_LOG_EVERY
    with capture_logs() as logs:
        await list_companies(database.pool)
        await list_companies(database.pool)
        for _ in range(2):
            with pytest.raises(CompanyMisconfigured):
                await get_company(database.pool, "odd")
    assert [e["event"] for e in logs] == ["company_settings_invalid"] * 3


async def test_settings_nested_too_deep_fail_closed_for_that_company_only(aiohttp_client, database, db_settings):
    """Regression (security review): settings nested ~3,000 deep (an operator's SQL; PostgreSQL keeps
    them) raised RecursionError in the row decoder: that company answered 500 internal_error, and
    every directory read (agent graph on any host, key rotation, `companies list`) failed with it."""
    odd = await create_company(database.pool, slug="odd", display_name="Odd", hostnames=["odd.example"])
    await create_company(database.pool, slug="fine", display_name="Fine", hostnames=["fine.example"])
    await _break_settings(db_settings, odd.id, '{"junk": ' + "[" * 3000 + "]" * 3000 + "}")
    settings = db_settings.model_copy(update={"webhook_worker": False})
    client = await aiohttp_client(create_app(settings, database=database))
    r = await client.get("/.well-known/ucp", headers={"Host": "odd.example"})
    body = await r.json()
    assert r.status == 500 and body["code"] == "company_misconfigured", body
    assert "nested too deep" in body["content"], body
    assert (await client.get("/.well-known/ucp", headers={"Host": "fine.example"})).status == 200
    assert (await client.get("/ucp/agent-graph", headers={"Host": "platform.test"})).status == 200
    assert [(c.slug, c.settings) for c in await list_companies(database.pool)] == [("fine", {}), ("odd", {})]


async def test_duplicate_slug_and_hostname_conflict_without_partial_rows(database):
    await create_company(database.pool, slug="one", display_name="One", hostnames=["one.example"])
    with pytest.raises(Conflict) as e1:
        await create_company(database.pool, slug="one", display_name="Again")
    assert e1.value.code == "slug_taken"
    with pytest.raises(Conflict) as e2:
        await create_company(database.pool, slug="two", display_name="Two", hostnames=["ONE.example"])
    assert e2.value.code == "hostname_taken"
    assert [c.slug for c in await list_companies(database.pool)] == ["one"]  # "two" not half-created


async def test_list_companies_keyset_pagination(database):
    for i in range(7):
        await create_company(database.pool, slug=f"c{i:02d}", display_name=f"C{i}")
    seen, after = [], None
    while True:
        page = await list_companies(database.pool, after_slug=after, limit=3)
        seen.extend(c.slug for c in page)
        if len(page) < 3:
            break
        after = page[-1].slug
    assert seen == [f"c{i:02d}" for i in range(7)]


async def test_get_unknown_company(database):
    with pytest.raises(CompanyNotFound):
        await get_company(database.pool, "nope")


async def test_host_cache_serves_from_cache_within_ttl(database):
    cache = HostCache(ttl=60)
    assert await cache.resolve(database.pool, "late.example") is None
    await create_company(database.pool, slug="late", display_name="Late", hostnames=["late.example"])
    assert await cache.resolve(database.pool, "late.example") is None  # cached negative answer
    cache.clear()
    assert (await cache.resolve(database.pool, "late.example")).slug == "late"
    zero = HostCache(ttl=0)
    assert (await zero.resolve(database.pool, "LATE.example")).slug == "late"


async def test_host_cache_concurrent_misses_share_one_lookup(database):
    await create_company(database.pool, slug="busy", display_name="Busy", hostnames=["busy.example"])
    cache = HostCache(ttl=60)
    assert cache.cached("busy.example") is HostCache.MISS
    found = await asyncio.gather(*(cache.resolve(database.pool, "busy.example") for _ in range(20)))
    assert all(c is found[0] for c in found) and found[0].slug == "busy"  # one query built one Company
    assert cache.cached("busy.example") is found[0]
    zero = HostCache(ttl=0)  # no caching asked for: each request reads the database itself
    found = await asyncio.gather(*(zero.resolve(database.pool, "busy.example") for _ in range(3)))
    assert len({id(c) for c in found}) == 3 and zero.cached("busy.example") is HostCache.MISS


@pytest.mark.parametrize(
    ("scheme", "host", "port", "origin"),
    [
        ("http", "127.0.0.1", 8182, "http://127.0.0.1:8182"),
        ("http", "localhost:8182", None, "http://localhost:8182"),
        ("http", "localhost:8182", 9000, "http://localhost:9000"),  # the configured public port wins
        ("http", "shop.example", None, "http://shop.example"),
        ("http", "shop.example:80", None, "http://shop.example"),
        ("https", "shop.example", 443, "https://shop.example"),
        ("https", "shop.example", 80, "https://shop.example:80"),
        ("http", "[::1]:8182", None, "http://[::1]:8182"),
        ("http", "[::1]", 8182, "http://[::1]:8182"),
        ("http", "::1", 8182, "http://[::1]:8182"),  # stored hostnames carry IPv6 unbracketed
        ("https", "shop.example.", None, "https://shop.example"),  # a fully qualified name: the stored one
        ("http", "shop.example.:8182", None, "http://shop.example:8182"),
        ("http", "[0:0:0:0:0:0:0:1]:8182", None, "http://[::1]:8182"),  # published as stored (RFC 5952)
        ("http", "[2001:DB8::A]", None, "http://[2001:db8::a]"),
    ],
)
def test_public_origin_keeps_non_default_ports(scheme, host, port, origin) -> None:
    assert public_origin(scheme, host, port) == origin


@pytest.mark.parametrize(
    ("host", "valid"),
    [
        ("shop.example", True),
        ("shop.example.", True),  # regression: a fully qualified name got 400 (the stored name drops the dot)
        ("shop.example.:8443", True),
        ("localhost.", True),
        ("[::1]", True),
        ("[::1]:8182", True),
        ("[2001:db8::a]", True),
        ("[:::::::]", False),  # regression: any hex, colon and dot run was taken and echoed into URLs
        ("[::ffff:127.0.0.1]", False),  # an IPv4-mapped address is never bound: its IPv4 form is
        ("[::127.0.0.1]", False),  # IPv4-compatible: deprecated (RFC 4291 §2.5.5.1), never bound
        ("[::7f00:1]", False),  # the same address, compressed
        ("[::]", True),  # the unspecified address is no IPv4-compatible one
        ("[::1:0:0]", True),  # above the low 32 bits
        ("[1.2.3.4]", False),  # an IPv4 address is never bracketed (RFC 3986 §3.2.2)
        ("[::1", False),
        ("shop.example..", False),
        (".shop.example", False),
        (".", False),
        ("shop.example:0", False),
        ("shop.example:65536", False),
    ],
)
def test_valid_host_header(host, valid) -> None:
    assert valid_host_header(host) is valid

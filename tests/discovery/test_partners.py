"""Partner registry, trust policy, per-request negotiation and the ``partners`` CLI (real PostgreSQL)."""

from __future__ import annotations

import argparse
import json

import pytest

from ucp_gateway.db import tenant_tx
from ucp_gateway.discovery import (
    CapabilitiesIncompatible,
    InvalidProfileUrl,
    ProfileFetcher,
    ProfileNotTrusted,
    ProfileUnreachable,
    VendorNamespace,
    VersionUnsupported,
    build_company_profile,
    negotiate_request,
)
from ucp_gateway.discovery.builder import default_payment_handlers
from ucp_gateway.discovery.cli import register
from ucp_gateway.discovery.partners import (
    add_partner,
    get_policy,
    list_partners,
    remove_partner,
    role_for_agent,
    set_policy,
)
from ucp_gateway.errors import BadRequest, NotFound
from ucp_gateway.tenancy import create_company
from ucp_gateway.versions import SERVED

from .conftest import fetch_settings, platform_profile

VENDOR = VendorNamespace("com.solidnumber", "https://solidnumber.com/ucp")
BUSINESS = {
    v: build_company_profile(
        origin="https://shop.test",
        vendor=VENDOR,
        subagents={},
        keys=[],
        payment_handlers=default_payment_handlers(VENDOR),
        version=v,
    )
    for v in SERVED
}
P1 = "https://agent.example/profile.json"


@pytest.fixture
async def company(database):
    return await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["acme.test"])


async def test_add_list_remove_and_roles(database, company) -> None:
    pool = database.pool
    unknown = await role_for_agent(pool, company.id, P1)
    assert (unknown.role, unknown.partner) == ("read_only", False)
    p = await add_partner(pool, company.id, profile_url=P1, role="employee", tier="pro", display_name="Agent")
    assert (p.role, p.tier) == ("employee", "pro")
    known = await role_for_agent(pool, company.id, P1)
    assert (known.role, known.tier, known.partner) == ("employee", "pro", True)
    await add_partner(pool, company.id, profile_url=P1, role="buyer")  # upsert keeps the name
    [only] = await list_partners(pool, company.id)
    assert (only.role, only.tier, only.display_name) == ("buyer", "starter", "Agent")
    await remove_partner(pool, company.id, P1)
    assert await list_partners(pool, company.id) == []
    with pytest.raises(NotFound):
        await remove_partner(pool, company.id, P1)


async def test_default_role_and_allowlist_mode(database, company) -> None:
    pool = database.pool
    await set_policy(pool, company.id, default_role="buyer")
    assert (await role_for_agent(pool, company.id, P1)).role == "buyer"
    await set_policy(pool, company.id, trust_mode="allowlist")
    assert await get_policy(pool, company.id) == type(await get_policy(pool, company.id))("allowlist", "buyer")
    with pytest.raises(ProfileNotTrusted) as info:
        await role_for_agent(pool, company.id, P1)
    assert (info.value.code, info.value.http_status) == ("profile_not_trusted", 403)
    await add_partner(pool, company.id, profile_url=P1, role="admin")
    assert (await role_for_agent(pool, company.id, P1)).role == "admin"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"profile_url": "http://agent.example/p", "role": "buyer"},
        {"profile_url": "not a url", "role": "buyer"},
        {"profile_url": P1, "role": "superuser"},
        {"profile_url": P1, "role": "buyer", "tier": "platinum"},
    ],
)
async def test_invalid_partner_rejected_without_a_row(database, company, kwargs) -> None:
    with pytest.raises(BadRequest):
        await add_partner(database.pool, company.id, **kwargs)
    assert await list_partners(database.pool, company.id) == []


async def test_partners_are_tenant_isolated(database, company) -> None:
    other = await create_company(database.pool, slug="other", display_name="Other")
    await add_partner(database.pool, company.id, profile_url=P1, role="admin")
    assert await list_partners(database.pool, other.id) == []
    async with tenant_tx(database.pool, other.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM partners") == 0


async def test_negotiate_request_end_to_end(database, company, platform_server, clock) -> None:
    fetcher = ProfileFetcher(fetch_settings(), clock=clock)
    hosts = frozenset({"127.0.0.1"})
    header = f'profile="{platform_server.url()}"'
    kw = dict(fetcher=fetcher, pool=database.pool, company=company, business_profiles=BUSINESS, http_hosts=hosts)
    try:
        result = await negotiate_request(header=header, operation="checkout", **kw)
        assert result.role.role == "read_only"
        assert set(result.negotiated.capabilities) == {
            "dev.ucp.shopping.checkout",
            "dev.ucp.shopping.fulfillment",
        }
        assert result.negotiated.response_registry("checkout") == {
            "dev.ucp.shopping.checkout": [{"version": "2026-04-08"}],
            "dev.ucp.shopping.fulfillment": [{"version": "2026-04-08"}],
        }
        with pytest.raises(CapabilitiesIncompatible):  # the platform does not do orders
            await negotiate_request(header=header, operation="order", **kw)
        with pytest.raises(InvalidProfileUrl):
            await negotiate_request(header=None, **kw)
        with pytest.raises(InvalidProfileUrl):
            await negotiate_request(header=f'profile="{platform_server.url()}"', **{**kw, "http_hosts": frozenset()})
        # allowlist mode: refused before any fetch
        await set_policy(database.pool, company.id, trust_mode="allowlist")
        before = platform_server.count("/other")
        with pytest.raises(ProfileNotTrusted):
            await negotiate_request(header=f'profile="{platform_server.url("/other")}"', **kw)
        assert platform_server.count("/other") == before
        await add_partner(
            database.pool,
            company.id,
            profile_url=platform_server.url("/other"),
            role="buyer",
            http_hosts=hosts,
        )
        ok = await negotiate_request(header=f'profile="{platform_server.url("/other")}"', **kw)
        assert ok.role.partner and ok.role.role == "buyer"
        # version mismatch and unreachable profiles
        await set_policy(database.pool, company.id, trust_mode="open")
        platform_server.document = platform_profile(platform_server.keys, version="2026-01-23")
        with pytest.raises(VersionUnsupported):
            await negotiate_request(header=f'profile="{platform_server.url("/third")}"', **kw)
        platform_server.fail = True
        with pytest.raises(ProfileUnreachable):
            await negotiate_request(header=f'profile="{platform_server.url("/unknown-path")}"', **kw)
    finally:
        await fetcher.close()


async def test_cli_add_list_remove_policy(db_settings, database, company, capsys) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"))

    async def run(*argv: str) -> int:
        args = parser.parse_args(list(argv))
        return await args.func(args, db_settings)

    assert (
        await run("partners", "add", "--company", "acme", "--profile", P1, "--role", "employee", "--tier", "pro") == 0
    )
    assert await run("partners", "policy", "--company", "acme", "--mode", "allowlist", "--default-role", "buyer") == 0
    capsys.readouterr()
    assert await run("partners", "list", "--company", "acme", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["trust_mode"] == "allowlist" and listed["default_role"] == "buyer"
    assert [(p["profile_url"], p["role"], p["tier"]) for p in listed["partners"]] == [(P1, "employee", "pro")]
    assert await run("partners", "remove", "--company", "acme", "--profile", P1) == 0
    assert await list_partners(database.pool, company.id) == []
    with pytest.raises(NotFound):
        await run("partners", "remove", "--company", "acme", "--profile", P1)
    with pytest.raises(NotFound):
        await run("partners", "list", "--company", "nope")
    with pytest.raises(SystemExit):
        parser.parse_args(["partners", "add", "--company", "acme", "--profile", P1, "--role", "god"])


async def test_negotiation_is_reused_only_for_the_same_profiles(database, company, platform_server, clock) -> None:
    fetcher = ProfileFetcher(fetch_settings(), clock=clock)
    header = f'profile="{platform_server.url()}"'
    kw = dict(fetcher=fetcher, pool=database.pool, company=company, http_hosts=frozenset({"127.0.0.1"}))
    try:
        a = await negotiate_request(header=header, operation="checkout", business_profiles=BUSINESS, **kw)
        b = await negotiate_request(header=header, operation="checkout", business_profiles=BUSINESS, **kw)
        assert b.negotiated is a.negotiated  # same fetched profile, same business document
        # a refreshed business document (a new object, here without fulfillment) is negotiated afresh
        leaf = BUSINESS["2026-04-08"]  # the platform profile speaks 2026-04-08
        caps = {k: v for k, v in leaf["ucp"]["capabilities"].items() if k != "dev.ucp.shopping.fulfillment"}
        other = {**BUSINESS, "2026-04-08": {**leaf, "ucp": {**leaf["ucp"], "capabilities": caps}}}
        c = await negotiate_request(header=header, operation="checkout", business_profiles=other, **kw)
        assert c.negotiated is not a.negotiated
        assert set(c.negotiated.capabilities) == {"dev.ucp.shopping.checkout"}
        with pytest.raises(CapabilitiesIncompatible):  # refusals are never remembered as successes
            await negotiate_request(header=header, operation="order", business_profiles=BUSINESS, **kw)
    finally:
        await fetcher.close()

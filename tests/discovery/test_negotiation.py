"""Negotiation: version check, intersection, transitive pruning (UCP overview "Intersection Algorithm")."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ucp_gateway.discovery import (
    CapabilitiesIncompatible,
    VersionUnsupported,
    check_version,
    intersect_capabilities,
    negotiate,
    prune_extensions,
    require_capability,
    select_for_operation,
)

CK = "dev.ucp.shopping.checkout"
CART = "dev.ucp.shopping.cart"
FUL = "dev.ucp.shopping.fulfillment"
DISC = "dev.ucp.shopping.discount"
ORD = "dev.ucp.shopping.order"


def e(version: str = "2026-04-08", extends: str | list[str] | None = None, **extra) -> dict:
    out = {"version": version, **extra}
    if extends is not None:
        out["extends"] = extends
    return out


# --- version check ---------------------------------------------------------------------------
def test_version_exact_match() -> None:
    assert check_version("2026-04-08", "2026-04-08", None) == "2026-04-08"


def test_version_in_supported_versions() -> None:
    supported = {"2026-01-23": "https://shop.example/.well-known/ucp/2026-01-23"}
    assert check_version("2026-01-23", "2026-04-08", supported) == "2026-01-23"


@pytest.mark.parametrize("platform", ["2026-01-11", "2099-01-01", "draft", ""])
def test_version_unsupported(platform: str) -> None:
    with pytest.raises(VersionUnsupported) as info:
        check_version(platform, "2026-04-08", {"2026-01-23": "https://x.example/v"})
    assert (info.value.code, info.value.http_status) == ("version_unsupported", 422)


# --- intersection ----------------------------------------------------------------------------
def test_highest_common_version_wins_and_business_entry_is_kept() -> None:
    business = {CK: [e("2026-01-23", spec="old"), e("2026-04-08", spec="new")]}
    platform = {CK: [e("2026-01-23"), e("2026-04-08"), e("2027-01-01")]}
    assert intersect_capabilities(business, platform) == {CK: e("2026-04-08", spec="new")}


def test_no_common_version_excludes_capability() -> None:
    business = {CK: [e("2026-04-08")], ORD: [e("2026-04-08")]}
    platform = {CK: [e("2026-01-23")], ORD: [e("2026-04-08")]}
    assert set(intersect_capabilities(business, platform)) == {ORD}


def test_capability_only_on_one_side_is_dropped() -> None:
    assert intersect_capabilities({CK: [e()]}, {ORD: [e()]}) == {}


def test_extension_pruned_when_parent_missing() -> None:
    business = {CK: [e()], FUL: [e(extends=CK)]}
    platform = {FUL: [e(extends=CK)]}  # platform does not do checkout
    assert intersect_capabilities(business, platform) == {}


def test_multi_parent_extension_needs_one_parent() -> None:
    multi = e(extends=[CK, CART])
    business = {CK: [e()], CART: [e()], DISC: [multi]}
    assert set(intersect_capabilities(business, {CART: [e()], DISC: [multi]})) == {CART, DISC}
    assert set(intersect_capabilities(business, {CK: [e()], DISC: [multi]})) == {CK, DISC}
    assert intersect_capabilities(business, {DISC: [multi]}) == {}


def test_chain_pruned_transitively() -> None:
    # checkout <- fulfillment <- com.example.fulfillment.slots <- com.example.slots.premium
    caps = {
        FUL: e(extends=CK),
        "com.example.slots": e(extends=FUL),
        "com.example.premium": e(extends="com.example.slots"),
        ORD: e(),
    }
    assert set(prune_extensions(caps)) == {ORD}
    caps[CK] = e()
    assert set(prune_extensions(caps)) == {CK, FUL, "com.example.slots", "com.example.premium", ORD}


def test_missing_parent_among_several_levels() -> None:
    caps = {
        CK: e(),
        "com.example.a": e(extends="com.example.missing"),
        "com.example.b": e(extends="com.example.a"),
    }
    assert set(prune_extensions(caps)) == {CK}


def test_rootless_cycle_is_pruned() -> None:
    caps = {"com.example.a": e(extends="com.example.b"), "com.example.b": e(extends="com.example.a")}
    assert prune_extensions(caps) == {}


# --- operation relevance, negotiate, refusal ----------------------------------------------------
def test_select_for_operation() -> None:
    caps = {CK: e(), FUL: e(extends=CK), DISC: e(extends=[CK, CART]), ORD: e(), CART: e()}
    assert set(select_for_operation(caps, "checkout")) == {CK, FUL, DISC}
    assert set(select_for_operation(caps, "order")) == {ORD}
    assert set(select_for_operation(caps, "cart")) == {CART, DISC}


def test_negotiate_success_and_response_registry() -> None:
    business = {CK: [e()], FUL: [e(extends=CK)], ORD: [e()]}
    result = negotiate(
        platform_version="2026-04-08",
        platform_capabilities={CK: [e()], FUL: [e(extends=CK)], ORD: [e()]},
        business_version="2026-04-08",
        business_capabilities=business,
        operation="checkout",
    )
    assert result.version == "2026-04-08"
    assert result.response_registry("checkout") == {
        CK: [{"version": "2026-04-08"}],
        FUL: [{"version": "2026-04-08"}],
    }


def test_negotiate_empty_intersection_is_a_200_envelope() -> None:
    with pytest.raises(CapabilitiesIncompatible) as info:
        negotiate(
            platform_version="2026-04-08",
            platform_capabilities={"com.other.thing": [e()]},
            business_version="2026-04-08",
            business_capabilities={CK: [e()]},
            continue_url="https://shop.example/cart",
        )
    err = info.value
    assert err.http_status == 200
    body = err.to_body()
    assert body["ucp"] == {"version": "2026-04-08", "status": "error"}
    assert body["messages"][0]["code"] == "capabilities_incompatible"
    assert body["messages"][0]["severity"] == "unrecoverable"
    assert body["continue_url"] == "https://shop.example/cart"


def test_negotiate_missing_operation_root_and_refusal_outside_set() -> None:
    kw = dict(
        platform_version="2026-04-08",
        business_version="2026-04-08",
        business_capabilities={CK: [e()], ORD: [e()]},
    )
    with pytest.raises(CapabilitiesIncompatible):
        negotiate(platform_capabilities={ORD: [e()]}, operation="checkout", **kw)
    result = negotiate(platform_capabilities={ORD: [e()]}, operation="order", **kw)
    require_capability(result, ORD)
    with pytest.raises(CapabilitiesIncompatible):
        require_capability(result, CK)


def test_negotiate_version_unsupported_comes_first() -> None:
    with pytest.raises(VersionUnsupported):
        negotiate(
            platform_version="2026-01-11",
            platform_capabilities={CK: [e()]},
            business_version="2026-04-08",
            business_capabilities={CK: [e()]},
        )


# --- properties --------------------------------------------------------------------------------
NAMES = [CK, CART, ORD, FUL, DISC, "com.example.a", "com.example.b", "com.example.c"]
VERSIONS = ["2026-01-11", "2026-01-23", "2026-04-08"]


@st.composite
def registries(draw):
    reg = {}
    for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=len(NAMES))):
        versions = draw(st.lists(st.sampled_from(VERSIONS), unique=True, min_size=1, max_size=3))
        parents = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
        if parents and draw(st.booleans()):
            ext = parents[0] if len(parents) == 1 and draw(st.booleans()) else parents
        else:
            ext = None
        reg[name] = [e(v, ext) for v in versions]
    return reg


def shuffled(reg: dict, rnd: random.Random) -> dict:
    items = list(reg.items())
    rnd.shuffle(items)
    out = {}
    for k, entries in items:
        entries = list(entries)
        rnd.shuffle(entries)
        out[k] = entries
    return out


@settings(max_examples=100, deadline=None)
@given(registries(), registries())
def test_result_is_subset_of_both_sides(business, platform) -> None:
    result = intersect_capabilities(business, platform)
    for name, entry in result.items():
        assert name in business and name in platform
        assert entry in business[name]
        assert entry["version"] in {p["version"] for p in platform[name]}
        parents = entry.get("extends")
        if parents:
            parents = [parents] if isinstance(parents, str) else parents
            assert any(p in result for p in parents)


@settings(max_examples=100, deadline=None)
@given(registries(), registries())
def test_pruning_is_idempotent(business, platform) -> None:
    result = intersect_capabilities(business, platform)
    assert prune_extensions(result) == result
    flat = {k: v[0] for k, v in business.items()}
    once = prune_extensions(flat)
    assert prune_extensions(once) == once
    assert set(once) <= set(flat)


@settings(max_examples=100, deadline=None)
@given(registries(), registries(), st.integers(0, 2**32))
def test_input_order_does_not_change_result(business, platform, seed) -> None:
    rnd = random.Random(seed)
    expected = intersect_capabilities(business, platform)
    assert intersect_capabilities(shuffled(business, rnd), shuffled(platform, rnd)) == expected
    assert list(intersect_capabilities(shuffled(business, rnd), shuffled(platform, rnd))) == list(expected)


def test_wire_codes_of_discovery_errors() -> None:
    from ucp_gateway.discovery import (
        InvalidProfileUrl,
        ProfileMalformed,
        ProfileNotTrusted,
        ProfileUnreachable,
    )

    table = {
        InvalidProfileUrl: ("invalid_profile_url", 400, -32001),
        ProfileUnreachable: ("profile_unreachable", 424, -32001),
        ProfileMalformed: ("profile_malformed", 422, -32001),
        VersionUnsupported: ("version_unsupported", 422, -32001),
        ProfileNotTrusted: ("profile_not_trusted", 403, -32000),
    }
    for cls, (code, status, rpc) in table.items():
        err = cls("x")
        assert (err.code, err.http_status, err.jsonrpc_code) == (code, status, rpc)
        assert err.to_body() == {"code": code, "content": "x"}

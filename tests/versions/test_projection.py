"""The version table and the pure projections (no I/O)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ucp_gateway.errors import BadRequest
from ucp_gateway.versions import (
    ADVERTISED,
    CAPABILITIES,
    ROOT,
    SERVED,
    VERSIONS,
    capability_entries,
    from_wire,
    logical_name,
    register_shape,
    select_version,
    to_wire,
    wire_name,
)

V04 = "2026-04-08"


def test_served_versions_root_first_and_dates_only():
    assert SERVED == (ROOT, V04) and ROOT == "2026-08-25"
    for v in SERVED:
        assert len(v) == 10 and v[4] == v[7] == "-" and v.replace("-", "").isdigit()  # never "draft"
    assert VERSIONS[ROOT].profile_path == "/.well-known/ucp"
    assert VERSIONS[V04].profile_path == "/.well-known/ucp/2026-04-08"


def test_select_version_is_exact_never_by_date_order():
    assert select_version(ROOT).version == ROOT
    assert select_version(V04).version == V04
    for other in ("2026-01-23", "2026-01-11", "2026-09-01", "2026-08-24", "draft", ""):
        assert select_version(other) is None


def test_payment_namespace_moves_at_2026_08_25():
    assert wire_name("ap2_mandate", ROOT) == "dev.ucp.common.payment.ap2_mandate"
    assert wire_name("ap2_mandate", V04) == "dev.ucp.shopping.ap2_mandate"
    assert logical_name("dev.ucp.common.payment.ap2_mandate", ROOT) == "ap2_mandate"
    assert logical_name("dev.ucp.common.payment.ap2_mandate", V04) is None
    assert wire_name("catalog.search", ROOT) == "dev.ucp.shopping.catalog.search"
    assert wire_name("catalog.lookup", ROOT) == "dev.ucp.shopping.catalog.lookup"


@pytest.mark.parametrize("version", SERVED)
def test_capability_entries_declare_the_release_version(version):
    entries = capability_entries(version)
    assert [logical_name(n, version) for n in entries] == list(ADVERTISED)
    for name, (entry,) in entries.items():
        assert entry["version"] == version  # snapshot rule: every dev.ucp.* entry declares the release
        assert entry["schema"].startswith(f"https://ucp.dev/{version}/schemas/")
        assert entry["spec"].startswith(f"https://ucp.dev/{version}/specification/")
    assert entries["dev.ucp.shopping.discount"][0]["extends"] == "dev.ucp.shopping.checkout"
    assert "extends" not in entries["dev.ucp.shopping.checkout"][0]
    # extension parents name the version's own wire names
    ap2 = capability_entries(version, ("checkout", "ap2_mandate"))[CAPABILITIES["ap2_mandate"][version].name][0]
    assert ap2["extends"] == "dev.ucp.shopping.checkout"


def _profile(keys):
    return {
        "ucp": {
            "version": "x",
            "supported_versions": {V04: "https://shop.example/.well-known/ucp/2026-04-08"},
            "services": {},
            "capabilities": {},
            "payment_handlers": {
                "com.example.pay": [
                    {
                        "id": "h",
                        "version": "2026-04-08",
                        "available_instruments": [{"type": "card", "constraints": {"brands": ["visa"]}}],
                    }
                ]
            },
        },
        "keys": keys,
    }


EC = {"kid": "ec", "kty": "EC", "crv": "P-256", "x": "a", "y": "b", "alg": "ES256"}
EC384 = {"kid": "ec384", "kty": "EC", "crv": "P-384", "x": "a", "y": "b"}
OKP = {"kid": "ed", "kty": "OKP", "crv": "Ed25519", "x": "c", "alg": "EdDSA"}


def test_profile_shapes_per_version():
    neutral = _profile([EC, EC384, OKP])
    before = copy.deepcopy(neutral)
    root = to_wire("profile", neutral, ROOT)
    leaf = to_wire("profile", neutral, V04)
    assert neutral == before  # inputs are never mutated (bodies are shared by caches)
    assert [k["kid"] for k in root["keys"]] == ["ec", "ec384", "ed"]
    assert [k["kid"] for k in root["signing_keys"]] == ["ec"]  # the ES256 mirror only
    assert root["ucp"]["supported_versions"] == {V04: "https://shop.example/.well-known/ucp/2026-04-08"}
    assert root["ucp"]["map_order"] == {"payment_handlers": ["com.example.pay"]}
    (instr,) = root["ucp"]["payment_handlers"]["com.example.pay"][0]["available_instruments"]
    assert instr["constraints"] == {"properties": {"brand": {"enum": ["visa"]}}}
    # the leaf: EC keys only, no supported_versions (a leaf MUST NOT list other versions), no map_order
    assert [k["kid"] for k in leaf["signing_keys"]] == ["ec", "ec384"] == [k["kid"] for k in leaf["keys"]]
    assert "supported_versions" not in leaf["ucp"] and "map_order" not in leaf["ucp"]
    (instr,) = leaf["ucp"]["payment_handlers"]["com.example.pay"][0]["available_instruments"]
    assert instr["constraints"] == {"brands": ["visa"]}


def test_profile_without_keys_lists_none():
    doc = _profile([])
    del doc["keys"]
    assert "keys" not in to_wire("profile", doc, ROOT) and "signing_keys" not in to_wire("profile", doc, V04)


def test_register_shape_refuses_a_second_function_and_unknown_versions():
    with pytest.raises(ValueError):
        register_shape("checkout", ROOT, response=lambda b, pv: dict(b))
    with pytest.raises(KeyError):
        register_shape("checkout", "2026-01-23", response=lambda b, pv: dict(b))


def test_unregistered_kind_is_identity():
    body = {"a": 1}
    assert to_wire("no.such.kind", body, ROOT) is body
    assert from_wire("no.such.kind", body, V04) is body


# -- consent: request and response directions --------------------------------------------------


def test_consent_request_2026_08_25_to_neutral():
    data = {
        "line_items": [],
        "buyer": {
            "email": "a@b.example",
            "consent": {
                "dev.ucp.consent.marketing": {"granted": True, "source": "platform"},
                "dev.ucp.consent.analytics": {"granted": True, "source": "business"},  # our default echoed
                "com.example.loyalty": {"granted": True, "source": "platform"},  # unadvertised: ignored
                "dev.ucp.consent.sale_or_sharing": {"granted": False, "source": "platform", "segments": {}},
            },
        },
    }
    out = from_wire("checkout.request", data, ROOT)
    assert out["buyer"] == {"email": "a@b.example", "consent": {"marketing": True, "sale_of_data": False}}
    assert from_wire("checkout.request", data, V04) is data  # 04-08 is the neutral shape


@pytest.mark.parametrize(
    "consent",
    [
        [],
        {"dev.ucp.consent.marketing": True},
        {"dev.ucp.consent.marketing": {"granted": "yes", "source": "platform"}},
        {"dev.ucp.consent.marketing": {"granted": True}},
        {"dev.ucp.consent.marketing": {"granted": True, "source": "buyer"}},
    ],
)
def test_consent_request_malformed_is_400_with_path(consent):
    with pytest.raises(BadRequest) as err:
        from_wire("checkout.request", {"buyer": {"consent": consent}}, ROOT)
    assert err.value.code == "invalid_request" and "$.buyer.consent" in err.value.message


def test_fulfillment_2026_08_25_types_destinations_both_ways():
    neutral = {
        "methods": [
            {
                "type": "pickup",
                "destinations": [{"id": "store", "name": "Store"}],
                "groups": [{"options": [{"id": "p", "description": "Today"}]}],
            }
        ]
    }
    body = {"ucp": {"capabilities": {}}, "id": "c", "fulfillment": neutral}
    (m,) = to_wire("checkout", body, ROOT)["fulfillment"]["methods"]
    assert m["destinations"] == [{"type": "business_location", "id": "store", "name": "Store"}]
    assert m["groups"][0]["options"][0]["description"] == {"plain": "Today"}
    assert body["fulfillment"] is neutral and "type" not in neutral["methods"][0]["destinations"][0]
    request = {
        "fulfillment": {"methods": [{"type": "shipping", "destinations": [{"type": "shipping_address", "id": "d"}]}]}
    }
    assert from_wire("checkout.request", request, ROOT)["fulfillment"]["methods"][0]["destinations"] == [{"id": "d"}]


# -- the property: two versions of one state differ only where the table says ------------------

_TEXT = st.text(alphabet="abcdefghij0123456789 ", min_size=1, max_size=12)
_CONSENT = st.dictionaries(st.sampled_from(["analytics", "preferences", "marketing", "sale_of_data"]), st.booleans())
_BUYER = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"email": _TEXT, "first_name": _TEXT, "consent": _CONSENT}),
)


@st.composite
def _checkout(draw) -> dict[str, Any]:
    caps = {"dev.ucp.shopping.checkout": [{"version": "v"}]}
    if draw(st.booleans()):
        caps["dev.ucp.shopping.buyer_consent"] = [{"version": "v"}]
    lines = draw(st.lists(st.tuples(_TEXT, st.integers(1, 9), st.integers(0, 10**6)), max_size=3))
    body: dict[str, Any] = {
        "ucp": {"version": "v", "status": "success", "capabilities": caps},
        "id": "chk_" + draw(_TEXT),
        "line_items": [
            {"id": f"li_{i}", "item": {"id": pid, "title": pid, "price": p}, "quantity": q}
            for i, (pid, q, p) in enumerate(lines)
        ],
        "status": draw(st.sampled_from(["incomplete", "ready_for_complete", "completed", "canceled"])),
        "currency": "USD",
        "totals": [{"type": "total", "amount": draw(st.integers(0, 10**7))}],
        "messages": [],
    }
    buyer = draw(_BUYER)
    if buyer is not None:
        body["buyer"] = buyer
    if draw(st.booleans()):
        mtype = draw(st.sampled_from(["shipping", "pickup"]))
        body["fulfillment"] = {
            "methods": [
                {
                    "id": "m1",
                    "type": mtype,
                    "destinations": [{"id": "d1", "address_country": "US"}],
                    "groups": [{"id": "g1", "options": [{"id": "o1", "title": "Std", "description": draw(_TEXT)}]}],
                }
            ]
        }
    return body


def _without(body: dict[str, Any], paths: frozenset[str]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    for path in paths:
        *parents, last = path.split(".")
        node = out
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
        if parents and isinstance(out.get(parents[0]), dict) and not out[parents[0]]:
            del out[parents[0]]  # a parent emptied by the removal is no difference either
    return out


@settings(max_examples=200, deadline=None)
@given(_checkout(), st.sampled_from(["checkout", "order", "error"]))
def test_projections_differ_only_in_the_named_fields(body, kind):
    before = copy.deepcopy(body)
    wires = {v: to_wire(kind, {**body, "ucp": {**body["ucp"], "version": v}}, v) for v in SERVED}
    assert body == before
    for v, wire in wires.items():
        assert wire["ucp"]["version"] == v
    named = VERSIONS[ROOT].wire_fields[kind] | VERSIONS[V04].wire_fields[kind]
    a, b = (_without(wires[v], named) for v in SERVED)
    assert a == b


@settings(max_examples=100, deadline=None)
@given(_checkout())
def test_consent_round_trips_through_2026_08_25(body):
    """What a 2026-08-25 platform reads back it can send back: the neutral booleans survive."""
    wire = to_wire("checkout", body, ROOT)
    caps = body["ucp"]["capabilities"]
    if "dev.ucp.shopping.buyer_consent" not in caps:
        assert "consent" not in (wire.get("buyer") or {})
        return
    purposes = wire["buyer"]["consent"]
    assert len(purposes) == 4 and all({"granted", "source", "description"} <= set(p) for p in purposes.values())
    back = from_wire("checkout.request", {"buyer": {"consent": purposes}}, ROOT)["buyer"]["consent"]
    assert back == ((body.get("buyer") or {}).get("consent") or {})


# -- carts and catalog answers ---------------------------------------------------------------------

_CART_CAPS = {"dev.ucp.shopping.cart": [{"version": "v"}]}
_CONSENT_CAP = {"dev.ucp.shopping.buyer_consent": [{"version": "v"}]}


def test_cart_consent_both_ways_at_2026_08_25():
    body = {"ucp": {"version": ROOT, "capabilities": _CART_CAPS}, "id": "cart_1",
            "buyer": {"email": "a@b.example", "consent": {"marketing": True}}}  # fmt: skip
    before = copy.deepcopy(body)
    assert to_wire("cart", body, ROOT)["buyer"] == {"email": "a@b.example"}  # not negotiated on the cart
    negotiated = {**body, "ucp": {**body["ucp"], "capabilities": {**_CART_CAPS, **_CONSENT_CAP}}}
    consent = to_wire("cart", negotiated, ROOT)["buyer"]["consent"]
    assert consent["dev.ucp.consent.marketing"] == {"granted": True, "source": "platform",
                                                    "description": "Send promotional offers and news."}  # fmt: skip
    assert body == before and to_wire("cart", body, V04) is body
    decision = {"granted": False, "source": "platform"}
    request = {"line_items": [], "buyer": {"consent": {"dev.ucp.consent.analytics": decision}}}
    assert from_wire("cart.request", request, ROOT)["buyer"]["consent"] == {"analytics": False}
    assert from_wire("cart.request", request, V04) is request
    with pytest.raises(BadRequest) as err:
        from_wire("cart.request", {"buyer": {"consent": {"dev.ucp.consent.marketing": True}}}, ROOT)
    assert "$.buyer.consent" in err.value.message
    assert from_wire("cart.request", ["not", "an", "object"], ROOT) == ["not", "an", "object"]


_MONEY = st.integers(0, 10**6)


@st.composite
def _cart(draw) -> dict[str, Any]:
    caps = dict(_CART_CAPS)
    if draw(st.booleans()):
        caps.update(_CONSENT_CAP)
    if draw(st.booleans()):
        caps["dev.ucp.shopping.discount"] = [{"version": "v"}]
    lines = draw(st.lists(st.tuples(_TEXT, st.integers(1, 9), _MONEY), max_size=3))
    body: dict[str, Any] = {
        "ucp": {"version": "v", "status": "success", "capabilities": caps},
        "id": "cart_" + draw(_TEXT),
        "line_items": [
            {
                "id": f"li_{i}",
                "item": {"id": pid, "title": pid, "price": p},
                "quantity": q,
                "totals": [{"type": "subtotal", "amount": p * q}, {"type": "total", "amount": p * q}],
            }
            for i, (pid, q, p) in enumerate(lines)
        ],
        "currency": "USD",
        "totals": [{"type": "subtotal", "amount": draw(_MONEY)}, {"type": "total", "amount": draw(_MONEY)}],
        "messages": [],
        "continue_url": "https://shop.example/carts/c",
        "expires_at": "2026-12-02T12:00:00Z",
    }
    buyer = draw(_BUYER)
    if buyer is not None:
        body["buyer"] = buyer
    return body


def _price(amount: int) -> dict[str, Any]:
    return {"amount": amount, "currency": "USD"}


@st.composite
def _search(draw) -> dict[str, Any]:
    products = []
    for i in range(draw(st.integers(0, 3))):
        prices = draw(st.lists(_MONEY, min_size=1, max_size=3))
        products.append({
            "id": f"p{i}", "title": draw(_TEXT), "description": {"plain": draw(_TEXT)},
            "price_range": {"min": _price(min(prices)), "max": _price(max(prices))},
            "categories": [{"value": draw(_TEXT)}],
            "variants": [{"id": f"p{i}v{j}", "title": draw(_TEXT), "description": {"plain": ""}, "price": _price(p),
                          "availability": {"available": p > 0, "status": "in_stock" if p > 0 else "out_of_stock"}}
                         for j, p in enumerate(prices)],
        })  # fmt: skip
    caps = {"dev.ucp.shopping.catalog.search": [{"version": "v"}]}
    more = draw(st.booleans())
    return {"ucp": {"version": "v", "status": "success", "capabilities": caps}, "products": products,
            "pagination": {"has_next_page": more, **({"cursor": "WyJ0aXRsZSJd"} if more else {})}}  # fmt: skip


def _at(body: dict[str, Any], version: str) -> dict[str, Any]:
    ucp = body["ucp"]
    caps = {n: [{**e, "version": version} for e in entries] for n, entries in ucp["capabilities"].items()}
    return {**body, "ucp": {**ucp, "version": version, "capabilities": caps}}


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.tuples(st.just("cart"), _cart()), st.tuples(st.just("catalog"), _search())))
def test_cart_and_catalog_projections_differ_only_in_the_named_fields(kind_body):
    kind, body = kind_body
    before = copy.deepcopy(body)
    wires = {v: to_wire(kind, _at(body, v), v) for v in SERVED}
    assert body == before
    named = VERSIONS[ROOT].wire_fields[kind] | VERSIONS[V04].wire_fields[kind]
    a, b = (_without(wires[v], named) for v in SERVED)
    assert a == b
    # the root's answers satisfy the 2026-08-25 models (ucp-sdk 0.5.0): the cart with its extensions
    from ucp_sdk.models.schemas.shopping import buyer_consent, cart, catalog_search, discount

    if kind == "cart":
        for model in (cart.Cart, discount.Cart, buyer_consent.Cart):
            model.model_validate(wires[ROOT])
    else:
        catalog_search.SearchResponse.model_validate(wires[ROOT])

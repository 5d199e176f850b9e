"""Registration rules (solid-verbs spec/manifest.md; digest §9 items 1-15). Pure: no database."""

import pytest

from ucp_gateway.verbs import RegistrationError, Registry, RiskClass, VerbPolicy, build_registry
from ucp_gateway.verbs.manifest import index, list_rows, listed
from ucp_gateway.verbs.schemas import SHAPES, envelope_validator, shape_validator


async def _h(ctx):
    return {}


def rec(**kw):
    base = {
        "name": "thing.read",
        "description": "Read a thing.",
        "shape": "aggregate",
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
    }
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


READ = VerbPolicy(RiskClass.READ)
WR = VerbPolicy(RiskClass.WRITE_REVERSIBLE)


@pytest.mark.parametrize("missing", ["name", "description", "shape", "input_schema"])
def test_required_fields(missing):
    with pytest.raises(RegistrationError):
        Registry().register(rec(**{missing: None}), READ, _h)


@pytest.mark.parametrize(
    "field,value",
    [
        ("name", "123bad"),
        ("name", "a..b"),
        ("shape", "crud"),
        ("side_effects", "sometimes"),
        ("surfaces", ["graphql"]),
        ("surfaces", []),
        ("description", ""),
        ("extra_field", 1),
        ("tier_floor", "platinum"),
        ("requires_consent", "yes"),
    ],
)
def test_invalid_values_rejected(field, value):
    with pytest.raises(RegistrationError):
        Registry().register(rec(**{field: value}), READ, _h)


@pytest.mark.parametrize("shape", [s for s in SHAPES])
def test_every_shape_accepted(shape):
    write = shape in ("transaction", "receipt", "revert", "macro")
    pol = VerbPolicy(RiskClass.WRITE_REVERSIBLE) if write else READ
    v = Registry().register(rec(shape=shape, side_effects="write" if write else None), pol, _h)
    assert v.shape == shape


def test_defaults_filled():
    v = Registry().register(rec(), READ, _h)
    assert v.record["side_effects"] == "read"
    assert v.record["surfaces"] == ["http", "mcp_stdio", "webmcp", "ucp", "cli"]
    assert v.record["requires_consent"] is False and v.record["tier_floor"] == "starter"
    assert v.record["output_schema"] == {"$ref": "https://solidnumber.com/solid-verbs/v1/shapes/aggregate.json"}


@pytest.mark.parametrize("reserved", ["company_id", "user_id"])
def test_reserved_inputs_rejected(reserved):
    with pytest.raises(RegistrationError, match=reserved):
        Registry().register(
            rec(input_schema={"type": "object", "properties": {reserved: {"type": "integer"}}}), READ, _h
        )
    with pytest.raises(RegistrationError):
        Registry().register(rec(input_schema={"type": "object", "required": [reserved]}), READ, _h)


def test_input_schema_must_be_a_schema():
    with pytest.raises(RegistrationError, match="valid JSON Schema"):
        Registry().register(rec(input_schema={"type": "object", "properties": {"x": {"type": "nope"}}}), READ, _h)


def test_last_write_wins_and_version_bumps():
    r = Registry()
    r.register(rec(description="one"), READ, _h)
    v0 = r.version
    r.register(rec(description="two"), READ, _h)
    assert r.get("thing.read").record["description"] == "two" and r.version == v0 + 1 and len(r) == 1


def test_blocked_and_colliding_names():
    r = Registry()
    for bad in ("customer_delete", "Customer.Delete", "company_delete"):
        with pytest.raises(RegistrationError, match="blocked"):
            r.register(rec(name=bad), READ, _h)
    r.register(rec(name="crm.lookup"), READ, _h)
    with pytest.raises(RegistrationError, match="collides"):
        r.register(rec(name="crm_lookup"), READ, _h)


def test_policy_consistency():
    r = Registry()
    with pytest.raises(RegistrationError, match="side_effects"):
        r.register(rec(shape="receipt"), WR, _h)  # write class, side_effects defaulted to read
    with pytest.raises(RegistrationError, match="requires_consent"):
        r.register(rec(shape="receipt", side_effects="write", requires_consent=False), WR, _h)
    with pytest.raises(RegistrationError, match="phrase builder"):
        r.register(rec(shape="receipt", side_effects="write"), VerbPolicy(RiskClass.WRITE_FINANCIAL), _h)
    with pytest.raises(RegistrationError, match="read shape"):
        r.register(rec(shape="preview", side_effects="write"), WR, _h)
    with pytest.raises(RegistrationError, match="write shape"):
        r.register(rec(shape="receipt"), READ, _h)
    with pytest.raises(RegistrationError, match="reversible"):
        r.register(rec(shape="receipt", side_effects="mixed"), WR, _h)
    with pytest.raises(RegistrationError, match="UCP"):
        r.register(
            rec(shape="receipt", side_effects="write"), VerbPolicy(RiskClass.IRREVERSIBLE, phrase=lambda a: "X"), _h
        )
    v = r.register(rec(shape="receipt", side_effects="write", surfaces=["http"]), WR, _h)
    assert v.record["requires_consent"] is True


def test_decorator_registration_from_another_package():
    r = Registry()

    @r.verb(rec(name="commerce.checkout_preview", shape="preview"), VerbPolicy(principals=frozenset({"buyer"})))
    async def handler(ctx):
        return {}

    assert r.get("commerce.checkout_preview").handler is handler


def test_demo_registry_covers_twelve_shapes_and_subagents():
    reg = build_registry()
    shapes = {v.shape for v in reg}
    assert set(SHAPES) - {"telemetry"} <= shapes
    assert {v.policy.subagent for v in reg} >= {
        "sales",
        "ar",
        "ap",
        "commissions",
        "service",
        "compliance",
        "marketing",
        "ops",
    }
    for v in reg:  # every published record is a valid VerbRecord
        from ucp_gateway.verbs.schemas import record_validator

        record_validator().validate(dict(v.record))


def test_admin_only_and_blocked_never_listed():
    r = Registry()
    r.register(rec(name="ops.secret_stats"), VerbPolicy(admin_only=True), _h)
    r.register(rec(name="ops.nuke", shape="receipt", side_effects="write"), VerbPolicy(RiskClass.BLOCKED), _h)
    r.register(rec(name="ops.visible"), READ, _h)
    assert [v.name for v in listed(r)] == ["ops.visible"]


def test_listed_by_subagent_keeps_disclosure_rules():
    r = Registry()
    r.register(rec(name="ap.read"), VerbPolicy(RiskClass.READ, subagent="ap"), _h)
    r.register(rec(name="ap.cli", surfaces=["cli"]), VerbPolicy(RiskClass.READ, subagent="ap"), _h)
    r.register(rec(name="ap.hidden"), VerbPolicy(admin_only=True, subagent="ap"), _h)
    r.register(rec(name="ar.read"), VerbPolicy(RiskClass.READ, subagent="ar"), _h)
    r.register(rec(name="any.read"), READ, _h)
    assert [v.name for v in listed(r, surface="ucp", subagent="ap")] == ["ap.read"]
    assert [v.name for v in listed(r, subagent="ap")] == ["ap.cli", "ap.read"]
    assert listed(r, subagent="ops") == []


def test_disclosure_waves():
    reg = build_registry()
    idx = index(listed(reg, tier="enterprise"))
    import json

    assert len(json.dumps(idx)) < 1024 and idx["payments"] == 2
    rows, nxt = list_rows(listed(reg), prefix="payments")
    assert {r["name"] for r in rows} == {"payments.refund", "payments.preview_refund_impact"} and nxt is None
    assert all("input_schema" not in r for r in rows)
    rows, nxt = list_rows(listed(reg), limit=3)
    assert len(rows) == 3 and nxt == rows[-1]["name"]


def test_envelope_schema():
    ev = envelope_validator()
    assert ev.is_valid({"ok": True, "verb": "x", "result": {}})
    assert ev.is_valid({"ok": False, "verb": "x", "error": {"reason": "role_denied", "message": "no"}})
    assert not ev.is_valid({"verb": "x"})
    assert not ev.is_valid({"ok": False, "verb": "x"})
    assert not ev.is_valid({"ok": True, "verb": "x", "error": {"reason": "a", "message": "b"}})
    assert shape_validator("receipt").is_valid({"status": "completed", "audit_id": 1})
    assert not shape_validator("receipt").is_valid({"status": "resized", "audit_id": 1})

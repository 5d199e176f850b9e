"""The compiled argument check (verbs/fastcheck.py) never accepts what jsonschema refuses, and
check_args answers exactly as jsonschema alone does. Pure: no database."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from ucp_gateway.commerce.verbs import provide as provide_commerce
from ucp_gateway.verbs import RiskClass, VerbPolicy, build_registry
from ucp_gateway.verbs.fastcheck import compile_check
from ucp_gateway.verbs.registry import ArgError, Registry

REGISTRY = build_registry([provide_commerce])
VERBS = list(REGISTRY)

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "minLength": 1, "maxLength": 5},
        "sha": {"type": "string", "pattern": "^[0-9a-f]{4}$"},
        "kind": {"type": "string", "enum": ["a", "b"]},
        "n": {"type": "integer", "minimum": 1, "maximum": 10},
        "flag": {"type": "boolean"},
    },
    "required": ["id"],
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=300),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, 2.0, 0.0, True, False]),
    st.text(max_size=12),
    st.sampled_from(["", "a", "b", "0a1f", "0A1F", "x\n", "GET", "/ucp/v1/x", "f" * 64, "é" * 5]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=2), st.dictionaries(st.text(max_size=3), scalars, max_size=2))


def _keys(schema) -> list[str]:
    return [*schema.get("properties", {}), "_x", "extra", "company_id"]


def _agrees(schema, args) -> None:
    check = compile_check(schema)
    if check is not None and check(args):
        assert Draft202012Validator(schema).is_valid(args), (schema, args)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_never_accepts_what_jsonschema_refuses(data):
    schema = data.draw(st.sampled_from([SCHEMA] + [v.record["input_schema"] for v in VERBS]))
    args = data.draw(st.dictionaries(st.sampled_from(_keys(schema)), values, max_size=6))
    _agrees(schema, args)


@pytest.mark.parametrize(
    "args,ok",
    [
        ({"id": "x"}, True),
        ({"id": "x", "sha": "0a1f", "kind": "b", "n": 10, "flag": False}, True),
        ({}, False),
        ({"id": ""}, False),
        ({"id": "toolong"}, False),
        ({"id": "x", "sha": "0A1F"}, False),
        ({"id": "x", "kind": "c"}, False),
        ({"id": "x", "n": 0}, False),
        ({"id": "x", "n": 11}, False),
        ({"id": "x", "n": True}, False),
        ({"id": "x", "n": 2.0}, False),  # jsonschema accepts 2.0 as an integer: left to it, still valid
        ({"id": "x", "flag": 1}, False),
        ({"id": "x", "other": 1}, False),
    ],
)
def test_compiled_check_cases(args, ok):
    assert compile_check(SCHEMA)(args) is ok
    _agrees(SCHEMA, args)


def test_unsupported_schemas_compile_to_none_or_defer():
    assert compile_check({"type": "object", "minProperties": 1}) is None
    assert compile_check({"type": "array"}) is None
    deferred = compile_check({"type": "object", "properties": {"xs": {"type": "array"}}})
    assert deferred is not None and deferred({}) and not deferred({"xs": []})


def test_commerce_verbs_take_the_fast_path():
    args = {"method": "PUT", "path": "/ucp/v1/checkout-sessions/c1", "body_text": "{}", "raw_sha256": "a" * 64}
    for name in ("checkout.update", "checkout.complete", "checkout.get"):
        verb = REGISTRY.get(name)
        assert verb.fast_check is not None and verb.fast_check({**args, "id": "c1"})
    assert REGISTRY.get("checkout.create").fast_check(args)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_check_args_equals_jsonschema_alone(data):
    verb = data.draw(st.sampled_from(VERBS))
    schema = verb.record["input_schema"]
    args = data.draw(st.dictionaries(st.sampled_from(_keys(schema)), values, max_size=6))
    reference = Registry()
    ref_verb = reference.register(
        {"name": "ref.check", "description": "reference", "shape": "aggregate", "input_schema": schema},
        VerbPolicy(RiskClass.READ),
        verb.handler,
    )
    object.__setattr__(ref_verb, "fast_check", None)  # jsonschema only
    assert verb.check_args(args) == ref_verb.check_args(args)
    assert all(isinstance(p, ArgError) for p in verb.check_args(args))

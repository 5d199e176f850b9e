"""Strict request JSON: bodies PostgreSQL cannot store are refused before any handler runs."""

from __future__ import annotations

import json

import pytest

from ucp_gateway.jsonbody import MAX_DEPTH, InvalidJson, loads_strict


def test_plain_documents_decode_like_json_loads():
    doc = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 2}], "buyer": {"email": "é@x.org"}, "n": None}
    raw = json.dumps(doc).encode()
    assert loads_strict(raw) == json.loads(raw) == doc
    assert loads_strict('"\\ud83c\\udf39"') == "\U0001f339"  # a paired surrogate escape is a real character


@pytest.mark.parametrize(
    "raw, why",
    [
        (b'{"id": "pot\\u0000"}', "U+0000"),
        (b'{"a\\u0000": 1}', "U+0000"),
        (b'["\\ud800"]', "surrogate"),
        (b'{"x": "\\udfff tail"}', "surrogate"),
        (b'{"x": NaN}', "NaN"),
        (b"[Infinity]", "Infinity"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "too deep"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "too deep"),
        (b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "too deep"),
    ],
)
def test_refused_bodies(raw, why):
    with pytest.raises(InvalidJson) as err:
        loads_strict(raw)
    assert why in str(err.value)


def test_depth_limit_is_inclusive():
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert loads_strict(ok) == json.loads(ok)

"""canonical_json / canonical_bytes (orjson fast path) give exactly the json module's text, or its error."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ucp_gateway.verbs import consent
from ucp_gateway.verbs.audit import redact
from ucp_gateway.verbs.consent import args_digest, canonical_bytes, canonical_json


def reference(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def outcome(fn, value):
    try:
        return "ok", fn(value)
    except Exception as exc:  # the type is what callers catch
        return "error", type(exc)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_same_text_or_same_error_as_json_module(value):
    want = outcome(reference, value)
    assert outcome(canonical_json, value) == want
    got_bytes = outcome(canonical_bytes, value)
    if want[0] == "ok":
        try:
            assert got_bytes == ("ok", want[1].encode())
        except UnicodeEncodeError:  # a lone surrogate: the bytes refuse it as str.encode does
            assert got_bytes == ("error", UnicodeEncodeError)
    else:
        assert got_bytes == want


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    ONE = 1


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    "value",
    [
        {"b": 'x\x00\x1f\x7f\u2028"\\\n/é😀\uffff', "é": 1, "z": 2, "😀": 3, "\uffff": 4, "Z": 5, "": 6},
        {"n": [2**63 - 1, -(2**63), 2**64, -(2**64) - 1, True, False, None, (1, "a")]},
        {"f": 1e16, "g": 1e-05, "h": 0.1, "i": -0.0},
        {"nan": math.nan},
        {"inf": [math.inf]},
        {1: "int key"},
        {"s": "\ud800"},
        {"u": uuid.UUID(int=1)},
        {"e": Color.RED},
        {"i": Level.ONE},
        {"d": Point(1)},
        {"t": datetime(2026, 1, 1, tzinfo=UTC)},
        [
            [
                [
                    [
                        [
                            [
                                [
                                    [
                                        [
                                            [
                                                [
                                                    [
                                                        [
                                                            [
                                                                [
                                                                    [
                                                                        [
                                                                            [
                                                                                [
                                                                                    [
                                                                                        [
                                                                                            [
                                                                                                [
                                                                                                    [
                                                                                                        [
                                                                                                            [
                                                                                                                [
                                                                                                                    [
                                                                                                                        [
                                                                                                                            [
                                                                                                                                [
                                                                                                                                    [
                                                                                                                                        [
                                                                                                                                            [
                                                                                                                                                [
                                                                                                                                                    [
                                                                                                                                                        [
                                                                                                                                                            [
                                                                                                                                                                [
                                                                                                                                                                    [
                                                                                                                                                                        [
                                                                                                                                                                            [
                                                                                                                                                                                [
                                                                                                                                                                                    [
                                                                                                                                                                                        [
                                                                                                                                                                                            [
                                                                                                                                                                                                [
                                                                                                                                                                                                    [
                                                                                                                                                                                                        [
                                                                                                                                                                                                            [
                                                                                                                                                                                                                [
                                                                                                                                                                                                                    [
                                                                                                                                                                                                                        [
                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                                                                                            1
                                                                                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                ]
                                                                                                                                                                                                            ]
                                                                                                                                                                                                        ]
                                                                                                                                                                                                    ]
                                                                                                                                                                                                ]
                                                                                                                                                                                            ]
                                                                                                                                                                                        ]
                                                                                                                                                                                    ]
                                                                                                                                                                                ]
                                                                                                                                                                            ]
                                                                                                                                                                        ]
                                                                                                                                                                    ]
                                                                                                                                                                ]
                                                                                                                                                            ]
                                                                                                                                                        ]
                                                                                                                                                    ]
                                                                                                                                                ]
                                                                                                                                            ]
                                                                                                                                        ]
                                                                                                                                    ]
                                                                                                                                ]
                                                                                                                            ]
                                                                                                                        ]
                                                                                                                    ]
                                                                                                                ]
                                                                                                            ]
                                                                                                        ]
                                                                                                    ]
                                                                                                ]
                                                                                            ]
                                                                                        ]
                                                                                    ]
                                                                                ]
                                                                            ]
                                                                        ]
                                                                    ]
                                                                ]
                                                            ]
                                                        ]
                                                    ]
                                                ]
                                            ]
                                        ]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ]
            ]
        ],
    ],
)
def test_edge_values_follow_the_json_module(value):
    assert outcome(canonical_json, value) == outcome(reference, value)


def test_cyclic_value_is_the_json_modules_error():
    a: list = []
    a.append(a)
    with pytest.raises(ValueError, match="Circular"):
        canonical_json(a)


def test_deep_value_goes_to_the_json_module():
    deep: list = [1]
    for _ in range(300):  # past orjson's recursion limit
        deep = [deep]
    assert canonical_json(deep) == reference(deep)


def test_digest_and_audit_args_of_a_ucp_call_unchanged():
    body = json.dumps({"line_items": [{"item": {"id": "pot"}, "quantity": 1}], "note": "café \u2028"})
    args = {"method": "PUT", "path": "/ucp/v1/checkout-sessions/chk_1", "body_text": body, "raw_sha256": "a" * 64}
    import hashlib

    assert args_digest(args) == hashlib.sha256(reference(args).encode()).hexdigest()
    assert canonical_json(redact(dict(args))) == reference(args)


def test_without_orjson_the_json_module_writes(monkeypatch):
    monkeypatch.setattr(consent, "orjson", None)
    v = {"b": [1, "é"], "a": None}
    assert canonical_json(v) == reference(v)
    assert canonical_bytes(v) == reference(v).encode()


def reference_redact(value):
    import re

    secret = re.compile(r"token|secret|password|credential|card|pan|cvv|cvc|authorization", re.I)
    if isinstance(value, dict):
        return {k: ("[redacted]" if secret.search(str(k)) else reference_redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [reference_redact(v) for v in value]
    return value


keys = st.sampled_from(["token", "Card_Number", "apiSecret", "span", "name", "id", "x"]) | st.text(max_size=5)
redact_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys | st.integers(), inner, max_size=4),
    max_leaves=15,
)


@settings(max_examples=300, deadline=None)
@given(redact_values)
def test_redact_matches_the_plain_walk(value):
    assert repr(redact(value)) == repr(reference_redact(value))  # repr: NaN equals itself


def test_redact_hides_secret_keys_at_any_depth():
    args = {"payment": {"instruments": [{"credential": {"token": "tok_1"}, "id": "i"}]}, "Authorization": "x"}
    assert redact(args) == {
        "payment": {"instruments": [{"credential": "[redacted]", "id": "i"}]},
        "Authorization": "[redacted]",
    }

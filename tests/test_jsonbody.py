"""Strict request JSON: bodies PostgreSQL cannot store are refused before any handler runs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
        (b'{"x": 1e400}', "out of range"),  # would be inf, then null once stored (a regression)
        (b'{"x": [-1E999]}', "out of range"),
        ('{"x": 1e400}', "out of range"),
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


def test_the_largest_doubles_are_still_numbers():
    assert loads_strict(b"[1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 1e-400]") == [
        1.7976931348623157e308,
        -1.7976931348623157e308,
        5e-324,
        0.0,  # underflow is a finite value: kept
    ]


def test_depth_limit_is_inclusive():
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert loads_strict(ok) == json.loads(ok)


def _reference(raw):
    """loads_strict without the text fast path: decode, then always walk."""
    from ucp_gateway.jsonbody import _check

    value = json.loads(raw)
    _check(value, MAX_DEPTH)
    return value


def _outcome(fn, raw):
    try:
        return ("ok", fn(raw))
    except InvalidJson as exc:
        return ("refused", str(exc))
    except (ValueError, UnicodeDecodeError):
        return ("refused", "json")


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('a\x00é\ud800\udc00\U0001f339\\"')),
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.dictionaries(st.text(alphabet=st.sampled_from("k\x00\ud800é"), max_size=2), kids, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(_json_values, st.booleans(), st.booleans(), st.integers(min_value=0, max_value=MAX_DEPTH + 3))
def test_fast_path_answers_like_the_full_walk(value, ascii_only, as_bytes, extra_depth):
    # every text the gateway may get: escaped or raw non-ASCII, raw surrogates (surrogatepass bytes),
    # deep nesting near the limit; the fast path must decide exactly as decode + full walk
    text = "[" * extra_depth + json.dumps(value, ensure_ascii=ascii_only) + "]" * extra_depth
    raw = text.encode("utf-8", "surrogatepass") if as_bytes else text
    fast = _outcome(loads_strict, raw)
    ref = _outcome(lambda r: _reference(r), raw)
    if ref[0] == "ok":
        assert fast == ref
    else:
        assert fast[0] == "refused"
        assert fast == ref or ref[1] == "json"


@pytest.mark.parametrize(
    "raw",
    [
        '["\ud800"]',  # a raw lone surrogate in text input
        b'["\xed\xa0\x80"]',  # its UTF-8 (surrogatepass) bytes
        b'{"a": "b"}' + b" " * 10 + b'{"x": 1}',
        "[" * MAX_DEPTH + "]" * MAX_DEPTH,
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    ],
)
def test_fast_path_edge_cases(raw):
    fast, ref = _outcome(loads_strict, raw), _outcome(_reference, raw)
    assert fast == ref or (fast[0] == ref[0] == "refused")


def _stdlib(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _json_like(scalars, specials: str):
    """JSON-shaped values: ``scalars``, strings (with ``specials`` mixed in), lists and str-keyed dicts."""
    text = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(specials))
    return st.recursive(
        scalars | text,
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4),
        max_leaves=20,
    )


_INTS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
_out_values = _json_like(_INTS, '\x00\x1f\x7f\u2028"\\/é\U0001f339')


@settings(max_examples=500, deadline=None)
@given(_out_values)
def test_dumps_compact_writes_the_json_modules_bytes(value):
    from ucp_gateway.jsonbody import dumps_compact

    assert dumps_compact(value) == _stdlib(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=5))
def test_dumps_compact_floats_are_the_same_values(floats):
    from ucp_gateway.jsonbody import dumps_compact

    assert json.loads(dumps_compact(floats)) == json.loads(_stdlib(floats)) == floats


def test_dumps_compact_leaves_the_rest_to_the_json_module():
    import datetime
    import enum

    from ucp_gateway.jsonbody import dumps_compact

    class Kind(enum.StrEnum):
        A = "a"

    assert dumps_compact({1: "x", "big": 2**80, "kind": Kind.A, "t": (1, 2)}) == _stdlib(
        {1: "x", "big": 2**80, "kind": Kind.A, "t": (1, 2)}
    )
    with pytest.raises(TypeError):
        dumps_compact({"at": datetime.datetime(2026, 1, 1)})
    with pytest.raises(UnicodeEncodeError):
        dumps_compact(["\ud800"])


_db_values = _json_like(_INTS | st.floats(allow_nan=False, allow_infinity=False), '\x1f\x7f\u2028"\\/é\U0001f339')


@settings(max_examples=500, deadline=None)
@given(_db_values)
def test_db_codec_round_trips_the_json_modules_values(value):
    """The asyncpg json/jsonb codec: parameters mean what json.dumps means, columns decode to what
    json.loads gives (ints beyond 64 bits stay ints, never floats)."""
    from ucp_gateway.jsonbody import db_dumps, db_loads

    assert json.loads(db_dumps(value)) == json.loads(json.dumps(value))
    text = json.dumps(value)
    decoded = db_loads(text)
    assert decoded == json.loads(text)
    assert json.dumps(decoded) == text  # same types too (an int is not read back as a float)


@pytest.mark.parametrize(
    "text",
    [
        "18446744073709551616",
        '{"q": -9223372036854775809}',
        "[12345678901234567890123, 1]",
        '{"é": "\u0661", "n": 99999999999999999999}',
        "1e400",
        '"\\ud800"',
    ],
)
def test_db_loads_leaves_what_orjson_reads_differently_to_the_json_module(text):
    from ucp_gateway.jsonbody import db_loads

    assert json.dumps(db_loads(text)) == json.dumps(json.loads(text))


def test_db_dumps_leaves_the_rest_to_the_json_module():
    import datetime

    from ucp_gateway.jsonbody import db_dumps

    assert json.loads(db_dumps({1: "x", "big": 2**80})) == {"1": "x", "big": 2**80}
    with pytest.raises(TypeError):
        db_dumps({"at": datetime.datetime(2026, 1, 1)})


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": [1, 2.5, "x"]}',
        '{"a": 1}',
        "\ufeff{}",
        b"\xef\xbb\xbf{}",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": 1e400}',
        b'{"a": 1',
        b"\xff\xfe\x00",
        bytearray(b'{"b": true}'),
    ],
)
def test_loads_strict_decodes_as_json_loads(raw):
    """The shared decoder gives json.loads' value, or refuses what json.loads refuses (or NaN);
    bytes json.loads reads as UTF-16/32 are refused (test_non_utf8_bodies_are_refused)."""
    import json

    try:
        want = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        want = InvalidJson
    try:
        got = loads_strict(raw)
    except InvalidJson:
        got = InvalidJson
    if want is not InvalidJson and not any(c in str(raw) for c in ("NaN", "Infinity", "1e400")):
        assert got == want
    else:
        assert got is InvalidJson


_UTF8_ONLY = "must be UTF-8"


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("text", ['{"line_items": []}', '"\u00e9"', "[1]", "7", '{"a": "\u4e2d"}'])
def test_non_utf8_bodies_are_refused(codec, text):
    """Regression (newcomer): UTF-16-LE bytes without a BOM were read (json.loads guesses the encoding
    from the NUL pattern) and a checkout was created. RFC 8259 §8.1: JSON between systems MUST be
    UTF-8; with or without a BOM, every UTF-16/32 body is refused with the same message."""
    raw = text.encode(codec)
    assert json.loads(raw) is not None  # the json module reads it: what this guards against
    with pytest.raises(InvalidJson) as err:
        loads_strict(raw)
    assert _UTF8_ONLY in str(err.value)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1}\x00',  # a NUL byte is valid UTF-8 but never JSON outside strings...
        b'\x00{"a": 1}',
        b'{"a":\x00 1}',
        b'{"a": "x\x00y"}',  # ...and inside one it must be escaped
        b"\xff\xfe",
        b'{"a": "\xe9"}',  # Latin-1
        b"\xfe\xff\x00[\x001\x00]",
        bytearray('{"a": 1}'.encode("utf-16")),
    ],
)
def test_nul_bytes_and_invalid_utf8_are_refused(raw):
    with pytest.raises(InvalidJson) as err:
        loads_strict(raw)
    assert _UTF8_ONLY in str(err.value) and "not valid JSON" in str(err.value)


def test_utf8_bom_and_escaped_nul_keep_their_answers():
    assert loads_strict(b'\xef\xbb\xbf{"a": "\xc3\xa9"}') == {"a": "\u00e9"}  # RFC 8259 §8.1: MAY ignore a BOM
    with pytest.raises(InvalidJson, match="U\\+0000"):
        loads_strict(b'{"a": "\\u0000"}')


def test_loads_strict_refuses_other_types_as_json_loads():
    with pytest.raises(TypeError):
        loads_strict(memoryview(b"{}"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "long"),
    [
        ("1234567890123456789", True),
        ("123456789012345678", False),
        ('{"a": "x1234567890123456789y"}', True),
        ('{"a": 123456789, "b": 1234567890}', False),
        ("é" * 30 + "0" * 19, True),
        ("\u0661" * 25, False),  # non-ASCII digits: no JSON number is made of them
        ("", False),
    ],
)
def test_long_digit_runs_found_as_by_an_ascii_regex(text, long):
    import re

    from ucp_gateway.jsonbody import _long_digits

    assert _long_digits(text) is long
    assert (re.search(r"[0-9]{19}", text) is not None) is long


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789a é\u0661\ud800"), max_size=60))
def test_long_digits_agrees_with_the_regex(text):
    import re

    from ucp_gateway.jsonbody import _long_digits

    assert _long_digits(text) == (re.search(r"[0-9]{19}", text) is not None)


def _typed(value):
    """``value`` with every scalar tagged by its type (so 1 != 1.0 != True and -0.0 != 0.0)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


def _strict_outcome(raw):
    try:
        return ("ok", _typed(loads_strict(raw)))
    except InvalidJson as exc:
        return ("refused", str(exc))


def _stdlib_outcome(raw):
    """loads_strict by the json module alone (no orjson): the reference of its fast path."""
    from unittest import mock

    from ucp_gateway import jsonbody

    with mock.patch.object(jsonbody, "orjson", None):
        return _strict_outcome(raw)


_WS = st.sampled_from(["", " ", "\t", "\n", "\r\n", "  "])
_floats = st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e-7, 1e22, 5e-324, 1.7976931348623157e308])
_num_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | _floats | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
    max_leaves=10,
)


@settings(max_examples=400, deadline=None)
@given(_num_values, _WS, st.booleans(), st.booleans())
def test_orjson_fast_path_reads_as_the_json_module(value, ws, as_bytes, dup):
    text = json.dumps(value, ensure_ascii=False)
    if dup and isinstance(value, dict) and value:  # a repeated key: refused by both
        k = next(iter(value))
        text = "{" + json.dumps(k) + ":0," + text[1:]
    text = ws + text.replace(",", "," + ws).replace(":", ws + ":") + ws
    raw = text.encode("utf-8", "surrogatepass") if as_bytes else text
    assert _strict_outcome(raw) == _stdlib_outcome(raw)


_JUNK = '{}[],:"\\ 0123456789.eE+-truefalsnNIinfyx\t\x0c\x1f\u00e9\ufeff'


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(_JUNK), max_size=24))
def test_orjson_fast_path_refuses_as_the_json_module(text):
    for raw in (text, text.encode("utf-8", "surrogatepass"), b"\xef\xbb\xbf" + text.encode()):
        assert _strict_outcome(raw) == _stdlib_outcome(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"verb":"capability.manifest","verb":"payments.refund"}',
        '{"a":{"x":1,"x":2}}',
        b'{"u":"https://a.example:8443/p","a":1,"a":2}',  # colons in a string: the exact check decides
        b'{"a":1,"\\u0061":2}',  # the same name, escaped
        b'[{"k":[{"z":1,"z":1}]}]',
    ],
)
def test_a_repeated_member_name_is_refused(raw):
    """Regression (newcomer): a repeated name was read last-one-wins, so a dispatch body naming
    ``verb`` twice ran the second; parsers differ on which wins (RFC 7493 §2.3)."""
    with pytest.raises(InvalidJson, match="names a member twice"):
        loads_strict(raw)
    with pytest.raises(InvalidJson, match="names a member twice"):
        _stdlib_loads(raw)


@pytest.mark.parametrize(
    "raw", [b'[{"a":1},{"a":1}]', b'{"u":"a:b:c","v":{"w":"x:y"}}', '{"a":{"a":{"a":1}}}', b"{}", b'"a:b"']
)
def test_equal_names_in_different_objects_and_colons_in_strings_are_fine(raw):
    assert loads_strict(raw) == json.loads(raw) == _stdlib_loads(raw)


def _stdlib_loads(raw):
    from unittest import mock

    from ucp_gateway import jsonbody

    with mock.patch.object(jsonbody, "orjson", None):
        return loads_strict(raw)


@pytest.mark.parametrize(
    "raw",
    ["\ufeff{}", b"\xef\xbb\xbf{}", b'{"a":1e400}', b'{"a":-1e400}', b"[1234567890123456789]", b'{"a":1,"a":2}', b"-0"],
)
def test_orjson_fast_path_edge_cases(raw):
    assert _strict_outcome(raw) == _stdlib_outcome(raw)

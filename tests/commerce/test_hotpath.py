"""Per-request helpers rewritten for speed give what the straightforward code gives."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ucp_gateway.commerce.checkout import ShopInfo, rfc3339
from ucp_gateway.commerce.service import CommerceContext


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 30)),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_rfc3339_is_the_strftime_spelling(dt, offset_min):
    aware = dt.replace(tzinfo=timezone(timedelta(minutes=offset_min)))
    try:
        want = aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except OverflowError:
        with pytest.raises(OverflowError):
            rfc3339(aware)
        return
    assert rfc3339(aware) == want


def test_rfc3339_examples():
    assert rfc3339(datetime(2026, 11, 30, 12, 1, 2, 999999, tzinfo=UTC)) == "2026-11-30T12:01:02Z"
    assert rfc3339(datetime(2026, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=2)))) == "2025-12-31T23:00:00Z"


def test_with_last_write_is_dataclasses_replace():
    ctx = CommerceContext(
        company_id=__import__("uuid").uuid4(),
        caller="https://agent.example/p.json",
        now=datetime(2026, 1, 1, tzinfo=UTC),
        shop=ShopInfo(base_url="https://shop.example", ucp={"version": "2026-04-08"}),
        order_ucp={},
        handler_ids=frozenset({"h"}),
        max_order_amount=500,
    )

    async def write(sql, *args):  # a stand-in LastWrite
        return None

    got = ctx.with_last_write(write)
    assert got == dataclasses.replace(ctx, last_write=write)
    assert got is not ctx and ctx.last_write is None and got.last_write is write
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.caller = "x"  # type: ignore[misc]


def _outcome(f, *a):
    try:
        return ("ok", f(*a))
    except Exception as exc:  # the type and the message are what the caller sees (400 text)
        return (type(exc).__name__, str(exc))


_BODIES = [
    "",
    "{}",
    '{"line_items":[{"item":{"id":"pot_ceramic"},"quantity":1}]}',
    "[]",
    "1",
    "nul\x00l",
    '\x00{"a":1}',
    '{"a":"\\u0000"}',
    '{"a":"\\ud800"}',
    '{"a":NaN}',
    '{"a":Infinity}',
    '{"a":1e400}',
    '{"a":12345678901234567890123}',
    '{"a":1,"a":2}',
    "[" * 70 + "]" * 70,
    '{"a":' * 65 + "1" + "}" * 65,
    "\ufeff{}",
    '{"é":"ü"}',
    '{"a":1',
    '  {"a" : [1, 2.5, true, null]}  ',
    "\ud800",
]


@pytest.mark.parametrize("text", _BODIES)
def test_verb_body_text_parses_as_its_utf8_bytes(text):
    from ucp_gateway.commerce.validation import parse_json
    from ucp_gateway.commerce.verbs import _body

    assert _outcome(_body, {"body_text": text}) == _outcome(lambda t: parse_json(t.encode()), text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=40))
def test_verb_body_text_parses_as_its_utf8_bytes_any_ascii(text):
    from ucp_gateway.commerce.validation import parse_json
    from ucp_gateway.commerce.verbs import _body

    for t in (text, "{" + text + "}", '{"k":"' + text + '"}'):
        assert _outcome(_body, {"body_text": t}) == _outcome(lambda s: parse_json(s.encode()), t)


_HOSTS = ["shop.example", "Shop.Example:8443", "[::1]:8080", "::1", "127.0.0.1:80", "a:0", "a:99999", "", "x y"]
_HOSTS += ["[::1]"]


@pytest.mark.parametrize("host", _HOSTS)
def test_memoised_origin_and_host_check_are_tenancys(host):
    from ucp_gateway.commerce.context import _origin, _valid_host
    from ucp_gateway.tenancy import public_origin, valid_host_header

    for _ in range(2):  # the second answer comes from the memo
        assert _valid_host(host) == valid_host_header(host)
        for scheme in ("https", "http"):
            for port in (None, 80, 443, 8182):
                # lower-cased as /.well-known/ucp writes it (host names are case-insensitive)
                assert _origin(scheme, host, port) == public_origin(scheme, host.lower(), port)

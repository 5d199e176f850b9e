"""The fast signature-base builder gives exactly the library's bytes, or declines."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from ucp_gateway.httpsig.base import fast_signature_base
from ucp_gateway.httpsig.rfc9421 import RequestView, parse_signatures, signature_base

from .vectors import cases, message_for

PARAMS = ';created=1618884473;keyid="k-1";nonce="n 1";tag="ucp"'


def _base_both(view: RequestView, si: str):
    view.headers["Signature-Input"] = si
    view.headers["Signature"] = "sig1=:AAAA:"
    (sig,) = parse_signatures(si, "sig1=:AAAA:")
    return fast_signature_base(view, sig.raw_components, sig.params), signature_base(view, sig)


@pytest.mark.parametrize("case", cases(), ids=[c["id"] for c in cases()])
def test_vectors_fast_equals_library_or_declines(case):
    msg = message_for(case["id"])
    (sig,) = parse_signatures(case["signature_input_field"], case["signature_field"])
    fast = fast_signature_base(msg, sig.raw_components, sig.params)
    if fast is not None:
        assert fast == signature_base(msg, sig)


HEADERS = [
    ("Host", "Shop.Example:443"),
    ("UCP-Agent", 'profile="https://p.example/x.json"'),
    ("Content-Type", "  application/json; charset=utf-8\t"),
    ("X-Dup", "a"),
    ("X-Dup", "b,  c"),
    ("X-Empty", ""),
    ("Idempotency-Key", "k-1"),
]


@pytest.mark.parametrize(
    ("url", "comps"),
    [
        ("https://Shop.Example:443/a/b?x=1&y=%20", '"@method" "@authority" "@path" "@query" "@scheme" "@target-uri"'),
        ("https://shop.example:8443/a%2Fb?", '"@authority" "@path" "@query" "@target-uri"'),
        ("http://shop.example:80/", '"@authority" "@target-uri" "x-dup" "x-empty" "content-type"'),
        ("https://shop.example/p", '"@query" "ucp-agent" "idempotency-key"'),
        ("https://shop.example/p", '"@path" "@query-param";name="x"'),  # declines (parameter)
        ("https://shop.example/p", '"@path" "missing-header"'),  # declines; library raises
    ],
)
def test_fast_equals_library(url, comps):
    view = RequestView("POST", url, CIMultiDict(HEADERS))
    si = f"sig1=({comps}){PARAMS}"
    try:
        fast, lib = _base_both(view, si)
    except Exception:
        view.headers.popall("Signature-Input")
        (sig,) = parse_signatures(si, "sig1=:AAAA:")
        assert fast_signature_base(view, sig.raw_components, sig.params) is None
        return
    assert fast is None or fast == lib
    if "name=" not in comps:
        assert fast == lib


def test_fast_declines_non_ascii_and_odd_params():
    view = RequestView("POST", "https://shop.example/p", CIMultiDict([("X-N", "caf\xe9")]))
    (sig,) = parse_signatures('sig1=("x-n");keyid="k"', "sig1=:AAAA:")
    assert fast_signature_base(view, sig.raw_components, sig.params) is None
    (sig,) = parse_signatures('sig1=("@path");keyid="k";created=1;foo="x"', "sig1=:AAAA:")
    assert fast_signature_base(view, sig.raw_components, sig.params) is None
    (sig,) = parse_signatures('sig1=("@path");keyid=tok', "sig1=:AAAA:")
    assert fast_signature_base(view, sig.raw_components, sig.params) is None


@pytest.mark.parametrize(
    "value",
    [
        *[c["signature_input_field"] for c in cases()],
        'sig1=("@method" "@authority");created=1;keyid="a b", sig2=();nonce="x"',
        'sig1=("@method");keyid="k";keyid="j"',
        'sig1=("@method");keyid=tok',
        'sig1=("@method" "x";req);created=1',
        'sig1=("@Method");created=1',
        "sig1=();created=-5;expires=999999999999999",
        'sig1=("a\\\\b");created=1',
        'sig1=("@method");flag',
        "sig1=(),  sig2=()",
    ],
)
def test_signature_input_fast_reader_agrees_with_http_sf(value):
    from ucp_gateway.httpsig.errors import SignatureInvalid
    from ucp_gateway.httpsig.rfc9421 import _sf_dict, _signature_input_dict

    try:
        expected = _sf_dict(value, "Signature-Input")
    except SignatureInvalid:
        with pytest.raises(SignatureInvalid):
            _signature_input_dict(value)
        return
    assert _signature_input_dict(value) == expected

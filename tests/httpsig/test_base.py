"""The fast signature-base builder gives exactly the library's bytes, or declines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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


# --- url_parts: the plain-URL regex splits exactly as the library's strict parser -------------


def _library_parts(url: str):
    from http_message_signatures import HTTPMessageSignaturesException
    from http_message_signatures._url import parse_url

    try:
        u = parse_url(url)
    except HTTPMessageSignaturesException:
        return None
    return u.scheme, u.host, u.port, u.path, u.query


@pytest.mark.parametrize(
    "url",
    [
        "https://shop.example/checkout-sessions",
        "https://Shop.Example:443/a/b?x=1&y=%20",
        "https://shop.example:8443/a%2Fb?",
        "https://shop.example:/p",
        "http://shop.example",
        "https://shop.example?q",
        "https://shop.example/p?a=%zz",
        "https://shop.example/p?a=%2",
        "https://shop.example/%E2%82%AC/x",
        "https://shop.example/a b",
        "https://user@shop.example/p",
        "https://[::1]:8443/p",
        "https://shop.example/p#frag",
        "HTTPS://shop.example/p",
        "ftp://shop.example/p",
        "https://shop.example/p?x=/?:@!$&'()*+,;=",
        "https://shop.example/\u00e9",
        "https:///p",
    ],
)
def test_url_parts_equals_library(url):
    from ucp_gateway.httpsig.base import url_parts

    assert url_parts(url) == _library_parts(url)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="hts:/.%?#@[]:-_~0123456789aAfFzZ =&;'!$()*+,\u00e9", max_size=40))
def test_url_parts_equals_library_fuzz(tail):
    from ucp_gateway.httpsig.base import url_parts

    for url in (tail, "https://" + tail, "https://shop.example" + tail, "https://shop.example/" + tail):
        assert url_parts(url) == _library_parts(url)


# --- UCP-Agent: the regex fast path and the cached http_sf path agree with plain http_sf ------


def _profile_reference(value: str, allow_http: bool):
    import http_sf

    from ucp_gateway.httpsig.errors import InvalidProfileUrl

    try:
        member = http_sf.parse(value.encode("latin-1"), tltype="dictionary").get("profile")
    except Exception:
        return InvalidProfileUrl
    url = member[0] if member else None
    if not isinstance(url, str) or not (url.startswith("https://") or (allow_http and url.startswith("http://"))):
        return InvalidProfileUrl
    return url


@pytest.mark.parametrize(
    "value",
    [
        'profile="https://platform.example/profile.json"',
        '  profile="https://platform.example/p"  ',
        'profile="http://platform.example/p"',
        'profile="https://p.example/a", version="2026-04-08"',
        'version=1, profile="https://p.example/a"',
        'profile="https://p.example/a";v=1',
        'profile="https://a.example/x", profile="https://b.example/y"',
        'profile="https://p.example/\\"q"',
        "profile=https://p.example/x",
        "profile=:aGk=:",
        'profile="https://p.example/x"\t',
        'profile="https://p.example/x",',
        'profile="https://p.example/\u00e9"',
        'profile=""',
        "profile",
        "garbage(",
    ],
)
@pytest.mark.parametrize("allow_http", [False, True])
def test_profile_url_of_agrees_with_http_sf(value, allow_http):
    from ucp_gateway.httpsig.errors import InvalidProfileUrl
    from ucp_gateway.httpsig.verify import profile_url_of

    want = _profile_reference(value, allow_http)
    for _ in range(2):  # the second call may come from the cache
        if want is InvalidProfileUrl:
            with pytest.raises(InvalidProfileUrl):
                profile_url_of(value, allow_http=allow_http)
        else:
            assert profile_url_of(value, allow_http=allow_http) == want


@pytest.mark.parametrize(
    "components",
    [
        ('"@method"', '"@authority"', '"@path"'),
        ('"@method"', '"@path";req', '"content-digest"'),
        ('"@query-param";name="x"', '"a\\\\b"', '"'),
        (),
    ],
)
def test_missing_components_matches_covered_names(components):
    from ucp_gateway.httpsig.policy import covered_names, missing_components

    required = ["@method", "@authority", "@path", "@query", "content-digest", 'a"b', "a\\\\b", ""]
    have = covered_names(components)
    assert missing_components(components, required) == [r for r in required if r not in have]


# --- parse_signatures: the single-member string reader agrees with the http_sf reader ---------

_SIG = "sig1=:" + "A" * 86 + "==:"


@pytest.mark.parametrize(
    ("si", "sg"),
    [
        ('sig1=("@method" "@authority" "@path");created=1618884473;keyid="k 1";nonce="n"', _SIG),
        ('  sig1=("@method")  ', "  " + _SIG + "  "),
        ("sig1=();created=-5;expires=007", _SIG),
        ('sig1=("@method"  "@path")', _SIG),
        ('sig1=("@method" "")', _SIG),
        ('sig1=("")', _SIG),
        ('sig1=("@method";req)', _SIG),
        ('sig1=("a\\\\b")', _SIG),
        ('sig1=("@method");keyid="k";keyid="j"', _SIG),
        ('sig1=("@method");keyid=tok', _SIG),
        ('sig1=("@method");flag', _SIG),
        ('sig1=("@method");created=1234567890123456', _SIG),
        ('sig1=("@method")\t', _SIG),
        ('sig1=("@method"), sig2=("@path")', _SIG + ", sig2=:AAAA:"),
        ('sig1=("@method")', "sig1=:"),
        ('sig1=("@method")', "sig1=::"),
        ('sig1=("@method")', "sig1=:AAA:"),
        ('sig1=("@method")', "sig1=:AA=A:"),
        ('sig1=("@method")', "sig2=:AAAA:"),
        ('sig=("@method")', "sig1=:AAAA:"),
        ('sig1=("@method")', "sig1=:AAAA:;x=1"),
        ('Sig1=("@method")', "Sig1=:AAAA:"),
        ('sig1=("@method" "x)")', _SIG),
        ('sig1=(")', _SIG),
        ('sig1=("@method");tag="a\\"b"', _SIG),
    ],
)
def test_single_signature_reader_agrees_with_general(si, sg):
    from ucp_gateway.httpsig.errors import SignatureInvalid
    from ucp_gateway.httpsig.rfc9421 import _parse_signatures_sf, _single_signature

    fast = _single_signature(si, sg)
    try:
        general = _parse_signatures_sf(si, sg)
    except SignatureInvalid:
        assert fast is None
        with pytest.raises(SignatureInvalid):
            parse_signatures(si, sg)
        return
    if fast is not None:
        assert [fast] == general
        assert fast.raw_components == general[0].raw_components
        assert fast.source == general[0].source
    assert parse_signatures(si, sg) == general


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet='sig1=(")@mthod ;created=1-"kyAB\\,\t', max_size=30),
    st.text(alphabet="sig1=:AB+/=:, \n", max_size=14),
)
def test_single_signature_reader_fuzz(si_tail, sg_tail):
    from ucp_gateway.httpsig.errors import SignatureInvalid
    from ucp_gateway.httpsig.rfc9421 import _parse_signatures_sf, _single_signature

    for si, sg in (("sig1=" + si_tail, "sig1=:" + sg_tail), ('sig1=("@method")' + si_tail, sg_tail)):
        fast = _single_signature(si, sg)
        if fast is None:
            continue
        try:
            general = _parse_signatures_sf(si, sg)
        except SignatureInvalid:
            pytest.fail(f"fast reader accepted what http_sf refuses: {si!r} {sg!r}")
        assert [fast] == general and fast.raw_components == general[0].raw_components

"""Response signing without the library's Structured Field round trips gives exactly the library's
signature base and Signature-Input, or declines so the library decides (RFC 9421 §2.4, §2.5)."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from http_message_signatures import HTTPMessageSigner, MappingKeyResolver, algorithms
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from ucp_gateway.httpsig.base import fast_response_base
from ucp_gateway.httpsig.rfc9421 import RequestView, ResponseView, parse_signatures, signature_base
from ucp_gateway.httpsig.signing import response_components, sign_response_view

from .signer import digest, new_key, raw_verify

NOW = dt.datetime(2026, 4, 8, 12, 0, 0, tzinfo=dt.UTC)
DEFAULT = (
    "@status",
    "content-digest",
    "content-type",
    '"@method";req',
    '"@authority";req',
    '"@path";req',
    '"content-digest";req',
)
REQ_BODY = b'{"payment":{"token":"tok_ok"}}'


def _request(url="https://shop.example/checkout-sessions/chk_1/complete", method="POST", extra=()):
    headers = CIMultiDict(
        [("Host", "shop.example"), ("Content-Type", "application/json"), ("Content-Digest", digest(REQ_BODY))]
    )
    for k, v in extra:
        headers.add(k, v)
    return RequestView(method, url, headers, REQ_BODY)


def _response(request=None, status=200, extra=(), body=b'{"id":"chk_1"}'):
    headers = CIMultiDict([("Content-Type", "application/json; charset=utf-8"), ("Content-Digest", digest(body))])
    for k, v in extra:
        headers.add(k, v)
    return ResponseView(status, headers, request, body)


def _library(view, ids, *, keyid="kid-1", nonce=None, tag=None, expires=None):
    """The library's (base, @signature-params) for the same signature, or the exception it raises."""
    signer = HTTPMessageSigner(signature_algorithm=algorithms.ECDSA_P256_SHA256)
    try:
        p = signer.prepare(
            view,
            key_id=keyid,
            created=NOW,
            expires=expires,
            nonce=nonce,
            tag=tag,
            include_alg=False,
            label="sig1",
            covered_component_ids=list(ids),
            use_existing_digest="Content-Digest" in view.headers,
        )
    except Exception as exc:  # any refusal: the fast path must decline
        return exc
    return p.signature_base, p.signature_params


def _params(keyid="kid-1", nonce=None, tag=None, expires=None):
    params = {"created": int(NOW.timestamp()), "keyid": keyid}
    if expires is not None:
        params["expires"] = int(expires.timestamp())
    if nonce is not None:
        params["nonce"] = nonce
    if tag is not None:
        params["tag"] = tag
    return params


def _check(view, ids, *, must_apply=False, **kw):
    fast = fast_response_base(view, tuple(ids), _params(**kw))
    lib = _library(view, ids, **kw)
    if isinstance(lib, Exception):
        assert fast is None, f"library refused ({lib}) but the fast path signed"
        return
    if must_apply:
        assert fast is not None
    assert fast is None or fast == lib


def test_default_components_take_the_fast_path_and_match():
    _check(_response(_request()), DEFAULT, must_apply=True)


@pytest.mark.parametrize(
    ("url", "ids"),
    [
        ("https://Shop.Example:443/a/b?x=1&y=%20", ['"@method";req', '"@authority";req', '"@path";req']),
        ("https://shop.example:8443/a%2Fb?", ["@status", '"@query";req', '"@target-uri";req', '"@scheme";req']),
        ("http://shop.example:80/", ['"@authority";req', '"@target-uri";req', '"content-type";req']),
        ("https://shop.example/p", ['"@status"', '"x-dup"', '"x-dup";req', '"x-tab"', '"x-empty"']),
        ("https://shop.example/p", ["@status", "content-type"]),
        ("https://shop.example/p", []),
        ("https://shop.example/p", ["@status", "content-type", "@status"]),  # repeat: library refuses
        ("https://shop.example/p", ["@status", '"@status";req']),  # @status of a request: refused
        ("https://shop.example/p", ["@method"]),  # derived request component without ;req: refused
        ("https://shop.example/p", ["@status", '"missing";req']),  # absent field: refused
        ("https://shop.example/p", ["@status", '"@query-param";name="x";req']),  # declines
        ("https://shop.example/p", ["@status", '"content-type";sf']),  # declines
        ("https://shop.example/p", ["@status", '"set-cookie"']),  # declines (the library may add bs)
        ("https://shop.example/p", ["Content-Type"]),  # upper case: refused
        ("https://user@shop.example/p", ['"@authority";req']),  # library's URL parser decides
        ("https://shop.example/caf\u00e9", ['"@path";req']),  # not ASCII: refused
    ],
)
@pytest.mark.parametrize("opts", [{}, {"nonce": "n-1", "tag": "ucp"}, {"expires": NOW + dt.timedelta(minutes=5)}])
def test_fast_equals_library(url, ids, opts):
    extra = [("X-Dup", "a"), ("X-Dup", " b,  c "), ("X-Tab", "a\tb"), ("X-Empty", ""), ("Set-Cookie", "s=1")]
    _check(_response(_request(url, extra=extra), extra=extra), ids, **opts)


@pytest.mark.parametrize(
    "view",
    [
        _response(None),  # no request: ;req components are refused
        _response(_request(method="post")),  # the library refuses a lower-case request method
        _response(_request(), status=204, body=b""),
        _response(_request(), extra=[("X-Fold", "a\r\n  b")]),
        _response(_request(), extra=[("X-Ctl", "a\x01b")]),
        _response(_request(), extra=[("X-Latin", "caf\xe9")]),
    ],
)
def test_fast_equals_library_odd_messages(view):
    for ids in (DEFAULT, ("@status", "content-type"), ("@status", "x-fold", "x-ctl", "x-latin")):
        _check(view, ids)


@pytest.mark.parametrize("opts", [{"nonce": 'a"b'}, {"tag": "t\\x"}, {"keyid": "k\u00e9"}, {"nonce": "a\x7fb"}])
def test_fast_declines_odd_parameters(opts):
    view = _response(_request())
    assert fast_response_base(view, DEFAULT, _params(**opts)) is None
    _check(view, DEFAULT, **opts)


_NAMES = ["@status", "content-type", "content-digest", "x-a", "x-b", "missing"]
_REQ = ["@method", "@authority", "@path", "@query", "@scheme", "@target-uri", "content-type", "x-a", "missing"]
_VALUE = st.one_of(
    st.text(alphabet="ab ,;=\t\"'\\", max_size=8), st.text(alphabet="ab ,\t\r\n\x00\x7f\u00e9", max_size=8)
)


@settings(max_examples=300, deadline=None)
@given(
    resp_ids=st.lists(st.sampled_from(_NAMES), max_size=4),
    req_ids=st.lists(st.sampled_from(_REQ), max_size=5),
    values=st.lists(_VALUE, min_size=4, max_size=4),
    path=st.text(alphabet="/ab%2F?=&.~:@ \u00e9", max_size=10),
    method=st.sampled_from(["POST", "GET", "OPTIONS", "post", " GET"]),
    status=st.sampled_from([200, 201, 404, 999]),
    with_request=st.booleans(),
)
def test_fast_equals_library_fuzz(resp_ids, req_ids, values, path, method, status, with_request):
    extra = [("X-A", values[0]), ("X-A", values[1]), ("X-B", values[2])]
    req = _request("https://shop.example/" + path, method=method, extra=[("X-A", values[3])]) if with_request else None
    ids = [*resp_ids, *(f'"{n}";req' for n in req_ids)]
    _check(_response(req, status=status, extra=extra), ids)


# --- end to end: the signature written by the fast path verifies, headers as the library writes ---


def _key():
    priv, jwk = new_key("kid-1")

    class Key:
        kid = "kid-1"
        private_key = priv

    return Key(), jwk


def _library_sign(view, key, **kw):
    signer = HTTPMessageSigner(
        signature_algorithm=algorithms.ECDSA_P256_SHA256,
        key_resolver=MappingKeyResolver(public_keys={}, private_keys={key.kid: key.private_key}),
    )
    signer.sign(view, key_id=key.kid, include_alg=False, use_existing_digest=True, **kw)


@pytest.mark.parametrize(
    "accept",
    [
        None,
        'rsig=("@status" "content-type" "@method";req);nonce="n-42";tag="mine";expires=1',  # ours instead
        'rsig=("@status" "@query-param";req;name="x")',  # not one we sign: our own coverage instead
        'rsig=("@status" "nope")',  # a field we did not choose: our own coverage instead
        # our coverage reordered plus @target-uri;req: signed as asked (the library decides the order)
        'rsig=("@path";req "@status" "content-digest" "content-type" "@method";req "@authority";req'
        ' "@query";req "content-digest";req "@target-uri";req);expires',
    ],
)
def test_fast_signature_verifies_and_matches_library_headers(accept):
    key, jwk = _key()
    view = _response(_request("https://shop.example/p?x=1"))
    sign_response_view(view, key, now=NOW, accept_signature=accept)
    si = view.headers["Signature-Input"]
    label, params = si.split("=", 1)
    (sig,) = parse_signatures(si, view.headers["Signature"])
    raw_verify(jwk, signature_base(view, sig), base64.b64decode(view.headers["Signature"].split(":")[1]))
    assert len(view.headers.getall("Signature")) == 1 and len(view.headers.getall("Signature-Input")) == 1

    ref = _response(_request("https://shop.example/p?x=1"))
    ids = [c if c.startswith('"') else f'"{c}"' for c in sig.components]
    kw = {"label": label, "created": NOW, "covered_component_ids": ids}
    kw |= {k: v for k, v in (("nonce", sig.params.get("nonce")), ("tag", sig.params.get("tag"))) if v}
    if "expires" in sig.params:
        kw["expires"] = NOW + dt.timedelta(minutes=5)
    _library_sign(ref, key, **kw)
    assert ref.headers["Signature-Input"] == si
    assert ref.headers["Content-Digest"] == view.headers["Content-Digest"]
    assert "nonce=" not in params and "tag=" not in params
    if accept is None or "@target-uri" not in accept:
        ours = response_components(True, view.request)
        assert ours == [*DEFAULT[:6], '"@query";req', DEFAULT[6]]
        assert params.startswith("(" + " ".join(f'"{c}"' if '"' not in c else c for c in ours) + ")")
    else:
        assert params.startswith(accept.split("=", 1)[1].split(";expires")[0]) and ";expires=" in params


def test_fast_signing_replaces_existing_signature_lines():
    key, _jwk = _key()
    view = _response(_request(), extra=[("signature", "old=:AAAA:"), ("Signature-Input", "old=()")])
    sign_response_view(view, key, now=NOW)
    assert view.headers.getall("Signature-Input") == [view.headers["Signature-Input"]]
    assert view.headers["Signature"].startswith("sig1=:")


def test_default_components_list():
    assert tuple(response_components(True, _request())) == DEFAULT


@pytest.mark.parametrize(
    "url",
    [
        "https://platform.example/hooks/orders",
        "https://platform.example:8443/hooks/orders?x=1&y=%20",
        "https://Platform.Example:443/a%2Fb",
        "https://[::1]:8443/hooks",  # not the plain grammar: the library signs
        "https://platform.example/caf\u00e9",  # the library refuses it, as before
    ],
)
def test_webhook_headers_match_library_and_verify(url):
    from urllib.parse import urlsplit

    from ucp_gateway.httpsig.signing import WEBHOOK_COMPONENTS, webhook_signature_headers

    key, jwk = _key()
    kw = {"body": b'{"event_id":"ev_1"}', "ucp_agent": 'profile="https://shop.example/.well-known/ucp"'}
    kw |= {"webhook_id": "wh_1", "webhook_timestamp": "1775649600", "now": NOW}
    try:
        h = webhook_signature_headers(key, url=url, **kw)
    except Exception as exc:
        with pytest.raises(type(exc)):
            _library_sign(RequestView("POST", url, CIMultiDict(), b""), key, covered_component_ids=["@method"])
        return
    headers = CIMultiDict((k, v) for k, v in h.items() if k not in ("Signature", "Signature-Input"))
    comps = list(WEBHOOK_COMPONENTS)
    if urlsplit(url).query:
        comps.insert(3, "@query")
    ref = RequestView("POST", url, headers, kw["body"])
    _library_sign(ref, key, label="sig1", created=NOW, covered_component_ids=comps)
    assert h["Signature-Input"] == ref.headers["Signature-Input"]
    view = RequestView("POST", url, CIMultiDict(h), kw["body"])
    (sig,) = parse_signatures(h["Signature-Input"], h["Signature"])
    raw_verify(jwk, signature_base(view, sig), base64.b64decode(h["Signature"].split(":")[1]))


def test_company_keys_qualify_for_the_fast_path():
    from cryptography.hazmat.primitives.asymmetric import ec

    from ucp_gateway.httpsig.signing import _es256

    key, _jwk = _key()
    assert _es256(key, "sig1") and _es256(key, "rsig")
    assert not _es256(key, "Sig1") and not _es256(key, "1sig")  # not a Dictionary key: library decides

    class P384:
        kid = "k"
        private_key = ec.generate_private_key(ec.SECP384R1())

    assert not _es256(P384(), "sig1")

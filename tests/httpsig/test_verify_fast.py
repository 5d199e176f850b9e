"""The verification fast path agrees with the library path it stands in for: the received
``@signature-params`` text, the whole-base character check, the direct ECDSA call, the request
shape and the single-candidate key selection."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from http_message_signatures import HTTPMessageSignaturesException, algorithms
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from ucp_gateway.httpsig import KeyNotFound, RequestView, StaticKeyResolver, verify_request
from ucp_gateway.httpsig.base import fast_base_for_ids
from ucp_gateway.httpsig.rfc9421 import _single_signature, ecdsa_verify, parse_signatures, signature_base
from ucp_gateway.httpsig.verify import _request_shape

from .signer import PROFILE, new_key, raw_sign, sign_request
from .test_verify import BODY, NOW, POLICY, N, view

_SIG = "sig1=:" + "A" * 86 + "==:"
COMPS = '("@method" "@authority" "@path" "content-type")'


# --- params_text: set only when it is byte-identical to the library's serialization -----------


@pytest.mark.parametrize(
    ("params", "canonical"),
    [
        (';created=1618884473;keyid="k 1";nonce="n";tag="ucp";alg="ecdsa-p256-sha256";expires=5', True),
        ("", True),
        (";created=-5", True),
        (";created=0", True),
        (";created=007", False),  # serializes as 7
        (";created=-0", False),  # serializes as 0
        (';created="1"', False),  # wrong type: the library refuses it later
        (";keyid=5", False),
        (';foo="x"', False),  # unregistered parameter
        (';keyid=""', True),
    ],
)
def test_params_text_is_the_library_serialization(params, canonical):
    for comps in (COMPS, "()", '("@method")'):
        sig = _single_signature(f"sig1={comps}{params}", _SIG)
        assert sig is not None
        if canonical:
            assert sig.params_text == sig.signature_params == f"{comps}{params}"
        else:
            assert sig.params_text is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["created", "expires", "keyid", "nonce", "tag", "alg", "x"]), max_size=4), st.data())
def test_params_text_fuzz(keys, data):
    parts = []
    for k in keys:
        if data.draw(st.booleans()):
            parts.append(f";{k}={data.draw(st.from_regex(r'-?[0-9]{1,15}', fullmatch=True))}")
        else:
            parts.append(f';{k}="{data.draw(st.from_regex(r"[ !#-Z^-~]{0,8}", fullmatch=True))}"')
    sig = _single_signature(f"sig1={COMPS}{''.join(parts)}", _SIG)
    if sig is not None and sig.params_text is not None:
        assert sig.params_text == sig.signature_params  # str() of http_sf's parse of the member


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["created", "expires", "keyid", "nonce", "tag", "alg", "x", "createdx"]),
            st.one_of(
                st.from_regex(r"-?[0-9]{1,15}", fullmatch=True), st.from_regex(r'"[ !#-Z^-~]{0,6}"', fullmatch=True)
            ),
        ),
        max_size=4,
    )
)
def test_canonical_parameters_regex_is_the_per_item_rule(items):
    """params_text is kept exactly when every parameter is registered, of its type, and an integer
    reads back as written (no 007, no -0): the rule the reader applied item by item before."""
    from ucp_gateway.httpsig.base import _INT_PARAMS, _STR_PARAMS

    text = "".join(f";{k}={v}" for k, v in items)
    sig = _single_signature(f"sig1={COMPS}{text}", _SIG)
    if sig is None:
        assert len({k for k, _ in items}) != len(items)  # only a repeated name declines here
        return
    rule = all(
        (k in _INT_PARAMS and v[0] != '"' and v == str(int(v))) or (k in _STR_PARAMS and v[0] == '"') for k, v in items
    )
    assert (sig.params_text is not None) == rule


# --- the fast base: with or without params_text, and the one character check -------------------

HEADERS = [("Content-Type", "application/json"), ("X-A", "a"), ("X-A", " b ")]


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet="ab \t\r\n\x00\x7f\u00e9,;", max_size=8),
    st.sampled_from(["POST", "GET", "PO ST", " POST", "PO\tST", "P\u00c9ST", "POST\n"]),
)
def test_fast_base_equals_library_or_declines(value, method):
    headers = CIMultiDict([*HEADERS, ("X-V", value)])
    msg = RequestView(method, "https://shop.example/p?q=1", headers)
    si = 'sig1=("@method" "@authority" "@path" "@query" "x-v" "x-a" "content-type");created=1;keyid="k"'
    (sig,) = parse_signatures(si, _SIG)
    fast = fast_base_for_ids(msg, sig.components, sig.params, sig.params_text)
    assert fast == fast_base_for_ids(msg, sig.components, sig.params)  # same without the text
    try:
        lib = signature_base(msg, sig)
    except HTTPMessageSignaturesException:
        assert fast is None  # never accept what the library refuses
        return
    assert fast is None or fast == lib
    printable = all(c == "\t" or " " <= c <= "~" for c in value)
    if printable and "\r" not in value and method == "POST":
        assert fast == lib  # the everyday case stays on the fast path


# --- ecdsa_verify: the library's ECDSA verify without its call layers ---------------------------


def _outcome(fn):
    try:
        fn()
    except (HTTPMessageSignaturesException, InvalidSignature) as exc:
        return type(exc)
    return None


def _both(alg, sig: bytes, msg: bytes):
    return (
        _outcome(lambda: ecdsa_verify(alg, sig, msg)),
        _outcome(lambda: alg.verify(signature=sig, message=msg)),
    )


def test_ecdsa_verify_matches_library_on_edge_cases():
    priv, _ = new_key()
    alg = algorithms.ECDSA_P256_SHA256(public_key=priv.public_key())
    msg = b"base"
    sig = raw_sign(priv, msg)
    r, s = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")
    high_s = sig[:32] + (N - s).to_bytes(32, "big")
    der = encode_dss_signature(r, s)
    cases = {
        "valid": (sig, None),
        "high_s": (high_s, None),  # ECDSA accepts (r, n - s); so does the library
        "der": (der, HTTPMessageSignaturesException),  # pitfall 1: DER instead of r||s
        "short": (sig[:63], HTTPMessageSignaturesException),
        "long": (sig + b"\x00", HTTPMessageSignaturesException),
        "empty": (b"", HTTPMessageSignaturesException),
        "zero_r": (bytes(32) + sig[32:], InvalidSignature),
        "zero_s": (sig[:32] + bytes(32), InvalidSignature),
        "r_is_n": (N.to_bytes(32, "big") + sig[32:], InvalidSignature),
        "flipped": (sig[:5] + bytes([sig[5] ^ 1]) + sig[6:], InvalidSignature),
    }
    for name, (blob, want) in cases.items():
        assert _both(alg, blob, msg) == (want, want), name
    assert _both(alg, sig, b"other") == (InvalidSignature, InvalidSignature)


def test_ecdsa_verify_p384_sizes():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    priv = ec.generate_private_key(ec.SECP384R1())
    alg = algorithms.ECDSA_P384_SHA384(public_key=priv.public_key())
    r, s = decode_dss_signature(priv.sign(b"m", ec.ECDSA(hashes.SHA384())))
    sig = r.to_bytes(48, "big") + s.to_bytes(48, "big")
    assert _both(alg, sig, b"m") == (None, None)
    assert _both(alg, sig[:64], b"m") == (HTTPMessageSignaturesException,) * 2


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=80), st.integers(0, 63), st.integers(0, 255))
def test_ecdsa_verify_fuzz(blob, pos, xor):
    priv, _ = new_key()
    alg = algorithms.ECDSA_P256_SHA256(public_key=priv.public_key())
    good = raw_sign(priv, b"m")
    mutated = good[:pos] + bytes([good[pos] ^ xor]) + good[pos + 1 :]
    for sig in (blob, mutated):
        fast, lib = _both(alg, sig, b"m")
        assert fast == lib


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from([32, 48]),
    st.integers(0, 40),
    st.integers(0, 40),
    st.binary(min_size=96, max_size=96),
    st.sampled_from([b"", b"\x80", b"\xff", b"\x7f", b"\x00\x80"]),
)
def test_der_signature_equals_encode_dss_signature(size, zeros_r, zeros_s, blob, lead):
    """The DER built from bytes equals the library's, whatever the leading zeros and high bits."""
    from ucp_gateway.httpsig.jwkalg import der_signature

    r = (bytes(zeros_r) + lead + blob)[:size]
    s = (bytes(zeros_s) + lead + blob[::-1])[:size]
    for sig in (r + s, bytes(size) + s, r + bytes(size), bytes(2 * size), b"\xff" * (2 * size)):
        want = encode_dss_signature(int.from_bytes(sig[:size], "big"), int.from_bytes(sig[size:], "big"))
        assert der_signature(sig, size) == want


# --- request shape: the query search after the scheme, as the former split did ------------------


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="hts:/?a.", max_size=16), st.sampled_from(["GET", "post", "DELETE"]), st.booleans())
def test_request_shape_matches_split(url, method, body):
    target = url.split("://", 1)[-1]
    q = target.find("?")
    v = RequestView(method, url, CIMultiDict([("UCP-Agent", "x")]), b"x" if body else b"")
    assert _request_shape(v) == (
        method.upper() in ("POST", "PUT", "PATCH", "DELETE"),
        0 <= q < len(target) - 1,
        True,
        body,
    )


# --- one signature: the same lookups and errors as select_signatures ----------------------------


async def test_single_candidate_unknown_kid_asks_once_then_forced():
    priv, jwk = new_key()
    res = StaticKeyResolver({PROFILE: [jwk]})
    with pytest.raises(KeyNotFound):
        await verify_request(view(sign_request(priv, body=BODY, kid="nope")), res, POLICY, NOW, None)
    assert list(res.calls) == [(PROFILE, "nope", False), (PROFILE, "nope", True)]
    got = await verify_request(view(sign_request(priv, body=BODY)), res, POLICY, NOW, None)
    assert got.kid == jwk["kid"] and list(res.calls)[-1] == (PROFILE, jwk["kid"], False)


# --- frozen_constructor: the same object as the dataclass's own __init__, still frozen -------------


def test_frozen_constructor_equals_dataclass_init():
    import dataclasses
    import uuid

    from ucp_gateway.httpsig.verify import VerifiedSignature, frozen_constructor
    from ucp_gateway.httpsig.web import AgentPrincipal

    vals = ("k", PROFILE, "sig1", ('"@method"',), 1, None, "n", None, "ecdsa-p256-sha256", {"kid": "k"})
    made = frozen_constructor(VerifiedSignature)(*vals)
    assert made == VerifiedSignature(*vals) and type(made) is VerifiedSignature
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.kid = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        frozen_constructor(VerifiedSignature)(*vals[:-1])
    p = (uuid.uuid4(), PROFILE, "k", "buyer", True, "agent", "signature")
    assert frozen_constructor(AgentPrincipal)(*p) == AgentPrincipal(*p)

"""verify_request against an independent hand-built signer: the server-side pitfalls of
httpsig-and-keys.md §5 (numbers in test names), coverage gate, errors and freshness."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from multidict import CIMultiDict

from ucp_gateway.httpsig import (
    AlgorithmUnsupported,
    DigestMismatch,
    KeyNotFound,
    MemoryReplayStore,
    RequestView,
    SignatureInvalid,
    SignatureMissing,
    SignaturePolicy,
    StaticKeyResolver,
    verify_request,
)
from ucp_gateway.httpsig.errors import InvalidProfileUrl

from .signer import PROFILE, b64, new_key, sign_request

NOW = dt.datetime(2026, 4, 8, 12, 0, tzinfo=dt.UTC)
T = int(NOW.timestamp())
BODY = b'{"line_items":[{"item":{"id":"rose"},"quantity":1}]}'
POLICY = SignaturePolicy()
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551  # P-256 group order


@pytest.fixture(scope="module")
def key():
    return new_key()


@pytest.fixture
def resolver(key):
    return StaticKeyResolver({PROFILE: [key[1]]})


def view(headers, *, method="POST", target="/checkout-sessions", body=BODY, origin="https://shop.example"):
    return RequestView(method, origin + target, CIMultiDict(headers), body, target)


async def ok(v, resolver, policy=POLICY, now=NOW, replay=None):
    return await verify_request(v, resolver, policy, now, replay)


async def test_valid_post_verifies(key, resolver):
    priv, _ = key
    got = await ok(view(sign_request(priv, body=BODY)), resolver)
    assert got.kid == "platform-2026" and got.profile_url == PROFILE and got.algorithm == "ecdsa-p256-sha256"
    assert '"content-digest"' in got.covered_components and got.created == T


async def test_unsigned_is_signature_missing(resolver):
    with pytest.raises(SignatureMissing) as e:
        await ok(view([("UCP-Agent", f'profile="{PROFILE}"')]), resolver)
    assert e.value.http_status == 401 and e.value.to_body()["code"] == "signature_missing"


async def test_p24_signature_without_signature_input_is_invalid(resolver):
    with pytest.raises(SignatureInvalid):
        await ok(view([("Signature", "sig1=:AAAA:")]), resolver)


async def test_p01_der_signature_rejected(key, resolver):
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    priv, _ = key
    h = sign_request(priv, body=BODY)
    raw = base64.b64decode(h[-1][1].split(":")[1])
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    h[-1] = ("Signature", f"sig1=:{b64(der)}:")
    with pytest.raises(SignatureInvalid):
        await ok(view(h), resolver)


async def test_p02_replay_cache_keys_on_keyid_and_nonce_not_bytes(key, resolver):
    priv, _ = key
    h = sign_request(priv, body=BODY, extra_params=';nonce="n-1"')
    store = MemoryReplayStore()
    assert (await ok(view(h), resolver, replay=store)).nonce == "n-1"
    with pytest.raises(SignatureInvalid, match="nonce"):
        await ok(view(h), resolver, replay=store)
    # malleated twin (r, n - s): still a valid ECDSA signature, still a replay
    raw = base64.b64decode(h[-1][1].split(":")[1])
    s = int.from_bytes(raw[32:], "big")
    twin = raw[:32] + (N - s).to_bytes(32, "big")
    h2 = [*h[:-1], ("Signature", f"sig1=:{b64(twin)}:")]
    await ok(view(h2), resolver)  # verifies without a replay store: the library accepts it
    with pytest.raises(SignatureInvalid, match="nonce"):
        await ok(view(h2), resolver, replay=store)


async def test_p03_authority_is_normalised(key, resolver):
    priv, _ = key
    h = sign_request(priv, body=BODY, authority="shop.example")
    assert (await ok(view(h, origin="https://SHOP.Example:443"), resolver)).kid
    h = sign_request(priv, body=BODY, authority="shop.example:8443")
    await ok(view(h, origin="https://shop.example:8443"), resolver)
    with pytest.raises(SignatureInvalid):
        await ok(view(h, origin="https://shop.example"), resolver)


async def test_p05_empty_query_is_question_mark(key, resolver):
    priv, _ = key
    comps = [
        "@method",
        "@authority",
        "@path",
        "@query",
        "ucp-agent",
        "idempotency-key",
        "content-digest",
        "content-type",
    ]
    h = sign_request(priv, body=BODY, components=comps)  # @query of a query-less target is "?"
    await ok(view(h, target="/checkout-sessions"), resolver)
    await ok(view(h, target="/checkout-sessions?"), resolver)


async def test_p06_raw_path_not_decoded(key, resolver):
    priv, _ = key
    h = sign_request(priv, body=BODY, path="/a%2Fb")
    await ok(view(h, target="/a%2Fb"), resolver)
    with pytest.raises(SignatureInvalid):
        await ok(view(h, target="/a/b"), resolver)


async def test_p07_query_param_reencoded(key, resolver):
    from .signer import build_base, raw_sign

    priv, _ = key
    target = "/search?var=this%20is&bar=with+plus+whitespace"
    ua = ("UCP-Agent", f'profile="{PROFILE}"')
    comps = '"@method" "@authority" "@path" "@query" "ucp-agent" "@query-param";name="bar"'
    params = f'({comps});created={T};keyid="platform-2026"'
    base = build_base(
        [
            ('"@method"', "GET"),
            ('"@authority"', "shop.example"),
            ('"@path"', "/search"),
            ('"@query"', "?var=this%20is&bar=with+plus+whitespace"),
            ('"ucp-agent"', ua[1]),
            ('"@query-param";name="bar"', "with%20plus%20whitespace"),
        ],
        params,
    )
    h = [ua, ("Signature-Input", f"sig1={params}"), ("Signature", f"sig1=:{b64(raw_sign(priv, base))}:")]
    await ok(view(h, method="GET", target=target, body=b""), resolver)


async def test_p08_duplicate_header_lines_keep_order(key, resolver):
    priv, _ = key
    comps = [
        "@method",
        "@authority",
        "@path",
        "ucp-agent",
        "idempotency-key",
        "content-digest",
        "content-type",
        "x-dup",
    ]
    hdrs = [("X-Dup", "a"), ("X-Dup", "b")]
    h = sign_request(priv, body=BODY, headers=hdrs, components=comps)
    await ok(view(h), resolver)
    swapped = [("X-Dup", "b"), ("X-Dup", "a"), *h[2:]]
    with pytest.raises(SignatureInvalid):
        await ok(view(swapped), resolver)


async def test_p09_ows_trimmed(key, resolver):
    priv, _ = key
    h = sign_request(priv, body=BODY, headers=[("Content-Type", "application/json")])
    h = [(n, f"  {v}\t") if n == "Content-Type" else (n, v) for n, v in h]
    await ok(view(h), resolver)


async def test_p10_uppercase_component_rejected(key, resolver):
    priv, _ = key
    h = sign_request(priv, body=BODY)
    h = [(n, v.replace('"content-type"', '"Content-Type"')) if n == "Signature-Input" else (n, v) for n, v in h]
    with pytest.raises(SignatureInvalid):
        await ok(view(h), resolver)


@pytest.mark.parametrize(("offset", "good"), [(3, True), (29, True), (31, False), (120, False)])
async def test_p11_created_in_future(key, resolver, offset, good):
    priv, _ = key
    h = sign_request(priv, body=BODY, created=T + offset)
    if good:
        await ok(view(h), resolver)
    else:
        with pytest.raises(SignatureInvalid, match="future"):
            await ok(view(h), resolver)


async def test_p12_expired_and_too_old(key, resolver):
    priv, _ = key
    with pytest.raises(SignatureInvalid, match="expired"):
        await ok(view(sign_request(priv, body=BODY, extra_params=f";expires={T - 1}")), resolver)
    await ok(view(sign_request(priv, body=BODY, extra_params=f";expires={T + 60}")), resolver)
    with pytest.raises(SignatureInvalid, match="old"):
        await ok(view(sign_request(priv, body=BODY, created=T - 400)), resolver)
    custom = SignaturePolicy(max_age=600)
    await ok(view(sign_request(priv, body=BODY, created=T - 400)), resolver, policy=custom)
    await ok(view(sign_request(priv, body=BODY, created=None)), resolver)  # UCP: created optional
    with pytest.raises(SignatureInvalid):
        await ok(
            view(sign_request(priv, body=BODY, created=None)),
            resolver,
            policy=SignaturePolicy(require_created=True),
        )


async def test_p13_alg_param_must_match_key(key, resolver):
    priv, _jwk = key
    await ok(view(sign_request(priv, body=BODY, extra_params=';alg="ecdsa-p256-sha256"')), resolver)
    with pytest.raises(AlgorithmUnsupported) as e:
        await ok(view(sign_request(priv, body=BODY, extra_params=';alg="hmac-sha256"')), resolver)
    assert e.value.http_status == 400 and e.value.code == "algorithm_unsupported"
    okp = {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
        "kid": "platform-2026",
    }
    # the key fixes the algorithm: an ECDSA signature checked as the key's Ed25519 fails
    with pytest.raises(SignatureInvalid):
        await ok(view(sign_request(priv, body=BODY)), StaticKeyResolver({PROFILE: [okp]}))
    with pytest.raises(AlgorithmUnsupported):  # an algorithm outside the registry: refused as such
        await ok(view(sign_request(priv, body=BODY)), StaticKeyResolver({PROFILE: [{**okp, "crv": "Ed448"}]}))


async def test_p14_unknown_or_other_profile_kid_same_answer(key):
    priv, jwk = key
    other = StaticKeyResolver({"https://other.example/p": [jwk]})
    errs = []
    for res, kid in (
        (StaticKeyResolver({PROFILE: [jwk]}), "nope"),
        (other, "platform-2026"),
        (StaticKeyResolver({PROFILE: []}), "platform-2026"),
    ):
        with pytest.raises(KeyNotFound) as e:
            await ok(view(sign_request(priv, body=BODY, kid=kid)), res)
        errs.append((e.value.http_status, e.value.to_body()))
        assert any(force for *_, force in res.calls)  # one forced refresh was asked for
    assert len(set(map(str, errs))) == 1 and errs[0][0] == 401


async def test_p15_extra_attacker_signatures_neither_break_nor_bypass(key, resolver):
    priv, _ = key
    h = sign_request(priv, body=BODY)
    si, sg = h[-2][1], h[-1][1]
    attacker, _ = new_key("evil")
    ah = sign_request(attacker, body=BODY, kid="evil", label="sig2")
    # attacker's valid signature with an unknown key, a malformed one, and a bogus one naming our kid
    extras_si = [ah[-2][1], 'bad=("@method");keyid=1', 'fake=("@method");keyid="platform-2026"']
    extras_sg = [ah[-1][1], "bad=:AAAA:", f"fake=:{b64(bytes(64))}:"]
    both = [*h[:-2], ("Signature-Input", ", ".join([*extras_si, si]))]
    both.append(("Signature", ", ".join([*extras_sg, sg])))
    got = await ok(view(both), resolver)
    assert got.label == "sig1"
    # the attacker's signature alone does not get in
    with pytest.raises(KeyNotFound):
        await ok(view(ah), resolver)


async def test_p16_body_needs_covered_digest_and_match(key, resolver):
    priv, _ = key
    comps = ["@method", "@authority", "@path", "ucp-agent", "idempotency-key", "content-type"]
    with pytest.raises(SignatureInvalid, match="content-digest"):
        await ok(view(sign_request(priv, body=BODY, components=comps)), resolver)
    h = sign_request(priv, body=BODY)
    with pytest.raises(DigestMismatch) as e:
        await ok(view(h, body=BODY + b" "), resolver)
    assert e.value.http_status == 400 and e.value.code == "digest_mismatch"
    md5 = [(n, "md5=:AAAA:" if n == "Content-Digest" else v) for n, v in h]
    with pytest.raises(DigestMismatch):
        await ok(view(md5), resolver)


@pytest.mark.parametrize(
    ("drop", "kw"),
    [
        ("@authority", {}),
        ("@method", {}),
        ("@path", {}),
        ("idempotency-key", {}),
        ("ucp-agent", {}),
        ("content-type", {}),
        ("@query", {"query": "a=1"}),
    ],
)
async def test_p18_coverage_gate(key, resolver, drop, kw):
    priv, _ = key
    base_comps = [
        "@method",
        "@authority",
        "@path",
        "@query",
        "ucp-agent",
        "idempotency-key",
        "content-digest",
        "content-type",
    ]
    comps = [c for c in base_comps if c != drop and (c != "@query" or kw)]
    h = sign_request(priv, body=BODY, components=comps, **kw)
    target = "/checkout-sessions" + ("?a=1" if kw else "")
    with pytest.raises(SignatureInvalid, match=drop):
        await ok(view(h, target=target), resolver)


async def test_get_without_body_needs_no_digest_or_idempotency(key, resolver):
    priv, _ = key
    h = sign_request(priv, method="GET", body=b"", path="/checkout-sessions/abc")
    await ok(view(h, method="GET", target="/checkout-sessions/abc", body=b""), resolver)


async def test_p19_signature_params_order_is_the_received_one(key, resolver):
    priv, _ = key
    h = sign_request(priv, body=BODY, created=None, extra_params=f";created={T}")  # keyid before created
    assert h[-2][1].endswith(f'keyid="platform-2026";created={T}')
    await ok(view(h), resolver)
    swapped = h[-2][1].replace(f'keyid="platform-2026";created={T}', f'created={T};keyid="platform-2026"')
    reordered = [*h[:-2], ("Signature-Input", swapped), h[-1]]
    with pytest.raises(SignatureInvalid):
        await ok(view(reordered), resolver)


async def test_p20_header_named_like_derived_component_is_ignored(key, resolver):
    priv, _ = key
    h = [*sign_request(priv, body=BODY), ("@method", "GET")]
    assert (await ok(view(h), resolver)).kid


async def test_p21_non_ascii_covered_value_is_invalid_not_500(key, resolver):
    priv, _ = key
    comps = [
        "@method",
        "@authority",
        "@path",
        "ucp-agent",
        "idempotency-key",
        "content-digest",
        "content-type",
        "x-name",
    ]
    h = sign_request(priv, body=BODY, headers=[("X-Name", "ascii")], components=comps)
    h = [(n, "caf\xe9" if n == "X-Name" else v) for n, v in h]
    with pytest.raises(SignatureInvalid):
        await ok(view(h), resolver)


async def test_p26_host_instead_of_authority_rejected(key, resolver):
    priv, _ = key
    comps = ["@method", "host", "@path", "ucp-agent", "idempotency-key", "content-digest", "content-type"]
    h = sign_request(priv, body=BODY, headers=[("Host", "shop.example")], components=comps)
    with pytest.raises(SignatureInvalid, match="@authority"):
        await ok(view(h), resolver)


async def test_profile_url_required_and_https(key, resolver):
    priv, _ = key
    h = sign_request(priv, body=BODY, profile=None)
    with pytest.raises(InvalidProfileUrl):
        await ok(view(h), resolver)
    h = sign_request(priv, body=BODY, profile="http://platform.example/p")
    with pytest.raises(InvalidProfileUrl):
        await ok(view(h), resolver)


async def test_es384_key_accepted_when_allowed():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    from .signer import build_base

    priv = ec.generate_private_key(ec.SECP384R1())
    n = priv.public_key().public_numbers()
    enc = lambda i: base64.urlsafe_b64encode(i.to_bytes(48, "big")).rstrip(b"=").decode()  # noqa: E731
    jwk = {"kty": "EC", "crv": "P-384", "x": enc(n.x), "y": enc(n.y), "kid": "p384"}
    ua = ("UCP-Agent", f'profile="{PROFILE}"')
    params = f'("@method" "@authority" "@path" "ucp-agent");created={T};keyid="p384"'
    base = build_base(
        [('"@method"', "GET"), ('"@authority"', "shop.example"), ('"@path"', "/x"), ('"ucp-agent"', ua[1])],
        params,
    )
    r, s = decode_dss_signature(priv.sign(base, ec.ECDSA(hashes.SHA384())))
    sig = r.to_bytes(48, "big") + s.to_bytes(48, "big")
    h = [ua, ("Signature-Input", f"sig1={params}"), ("Signature", f"sig1=:{b64(sig)}:")]
    res = StaticKeyResolver({PROFILE: [jwk]})
    got = await ok(view(h, method="GET", target="/x", body=b""), res)
    assert got.algorithm == "ecdsa-p384-sha384"
    with pytest.raises(AlgorithmUnsupported):
        await ok(view(h, method="GET", target="/x", body=b""), res, policy=SignaturePolicy(allow_es384=False))


def test_coverage_error_names_the_headers_the_request_lacks():
    from multidict import CIMultiDict

    from ucp_gateway.httpsig.verify import coverage_error

    prefix = "signature does not cover required components: "
    present = CIMultiDict({"Idempotency-Key": "k", "Content-Type": "application/json"})
    assert str(coverage_error(("idempotency-key", "@path"), present)) == prefix + "idempotency-key @path"
    one = CIMultiDict({"Content-Type": "application/json"})
    assert (
        str(coverage_error(("idempotency-key",), one)) == prefix + "idempotency-key (the request has no"
        " Idempotency-Key header; UCP requires it here, covered by the signature)"
    )
    two = str(coverage_error(("idempotency-key", "content-type"), CIMultiDict()))
    assert two.endswith(
        "(the request has no Idempotency-Key and Content-Type headers;"
        " UCP requires them here, covered by the signature)"
    )

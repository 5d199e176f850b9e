"""The fused route (httpsig/fused.py) gives the reference's decision: for every request it either
steps aside (None, before any key lookup) or accepts with the same result or refuses with the same
error code and message as verify_request (the general path)."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from ucp_gateway.errors import GatewayError
from ucp_gateway.httpsig import MemoryReplayStore, SignaturePolicy, StaticKeyResolver, verify_request
from ucp_gateway.httpsig.fused import verify_fused

from .signer import PROFILE, b64, digest, new_key, sign_request
from .test_verify import BODY, NOW, POLICY, T, view

KEY = new_key()
OTHER = new_key("other-kid")


async def outcome(coro):
    try:
        return "ok", await coro
    except GatewayError as exc:
        return exc.code, str(exc)


async def compare(
    headers, *, body=BODY, method="POST", target="/checkout-sessions", policy=POLICY, now=NOW, seen=(), keys=None
):
    """(reference outcome, fused outcome or None); each route gets its own resolver and replay store
    (``keys``: the profile's JWKs, default the P-256 test key)."""
    results = []
    for route in ("reference", "fused"):
        resolver = StaticKeyResolver({PROFILE: keys or [KEY[1]]})
        store = MemoryReplayStore()
        for kid, nonce in seen:
            await store.remember(kid, nonce, now=now, ttl=policy.replay_ttl)
        v = view(headers, method=method, target=target, body=body)
        if route == "reference":
            results.append(await outcome(verify_request(v, resolver, policy, now, store)))
        else:
            got = await outcome(verify_fused(v.headers, v.method, v.url, v.body, resolver, policy, now, store))
            results.append(None if got == ("ok", None) else got)
    return results


async def assert_same(headers, *, expect_fused=True, **kw):
    ref, fused = await compare(headers, **kw)
    if expect_fused:
        assert fused is not None, "the usual request must take the fused route"
    if fused is not None:
        assert fused == ref
    return ref


def signed(**kw):
    kw.setdefault("body", BODY)
    return sign_request(KEY[0], **kw)


def replace(headers, name, value):
    return [(n, value if n.lower() == name.lower() else v) for n, v in headers]


async def test_valid_request_same_result():
    ref = await assert_same(signed())
    assert ref[0] == "ok" and ref[1].kid == "platform-2026"


async def test_get_without_body():
    assert (await assert_same(signed(method="GET", body=b""), method="GET", body=b""))[0] == "ok"


async def test_query():
    h = signed(path="/checkout-sessions", query="a=1")
    assert (await assert_same(h, target="/checkout-sessions?a=1"))[0] == "ok"


async def test_tampered_body():
    assert (await assert_same(signed(), body=BODY + b" "))[0] == "digest_mismatch"


async def test_wrong_digest():
    # a digest of other bytes: the signature (over the received digest) fails, or the digest does
    assert (await assert_same(replace(signed(), "Content-Digest", digest(b"x"))))[0] == "digest_mismatch"


async def test_missing_components():
    h = signed(components=["@method", "@authority", "@path", "content-digest", "content-type"])
    assert (await assert_same(h))[0] == "signature_invalid"


async def test_extra_signature_steps_aside():
    h = signed()
    h += [("Signature-Input", 'sig2=("@method");keyid="x"'), ("Signature", "sig2=:" + b64(b"0" * 64) + ":")]
    ref, fused = await compare(h)
    assert fused is None and ref[0] == "ok"


async def test_der_signature():
    h = signed()
    sig = base64.b64decode(dict(h)["Signature"].split(":")[1])
    r, s = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    h = replace(h, "Signature", f"sig1=:{b64(encode_dss_signature(r, s))}:")
    assert (await assert_same(h))[0] == "signature_invalid"


async def test_alg_mismatch_and_match():
    assert (await assert_same(signed(extra_params=';alg="ecdsa-p384-sha384"')))[0] == "algorithm_unsupported"
    assert (await assert_same(signed(extra_params=';alg="ecdsa-p256-sha256"')))[0] == "ok"


async def test_expired_future_old():
    assert (await assert_same(signed(extra_params=f";expires={T - 1}")))[0] == "signature_invalid"
    assert (await assert_same(signed(created=T + 31)))[0] == "signature_invalid"
    assert (await assert_same(signed(created=T - 400)))[0] == "signature_invalid"
    assert (await assert_same(signed(created=None)))[0] == "ok"
    strict = SignaturePolicy(require_created=True, require_nonce=True)
    assert (await assert_same(signed(created=None), policy=strict))[0] == "signature_invalid"


async def test_replayed_nonce():
    h = signed(extra_params=';nonce="n-1"')
    assert (await assert_same(h))[0] == "ok"
    assert (await assert_same(h, seen=[("platform-2026", "n-1")]))[0] == "signature_invalid"


async def test_unknown_kid():
    assert (await assert_same(signed(kid="nope")))[0] == "key_not_found"
    h = sign_request(OTHER[0], kid="platform-2026", body=BODY)  # right kid, wrong key
    assert (await assert_same(h))[0] == "signature_invalid"


async def test_bad_profile():
    h = replace(signed(), "UCP-Agent", 'profile="http://platform.example/p"')
    assert (await assert_same(h))[0] == "invalid_profile_url"


async def test_es384_key_policy():
    priv = ec.generate_private_key(ec.SECP384R1())
    n = priv.public_key().public_numbers()
    jwk = {"kty": "EC", "crv": "P-384", "kid": "k384"}
    jwk |= {
        c: base64.urlsafe_b64encode(v.to_bytes(48, "big")).rstrip(b"=").decode() for c, v in (("x", n.x), ("y", n.y))
    }
    h = signed(kid="k384")
    for policy in (POLICY, SignaturePolicy(allow_es384=False)):
        v = view(h)
        ref = await outcome(verify_request(v, StaticKeyResolver({PROFILE: [jwk]}), policy, NOW, None))
        got = await outcome(
            verify_fused(v.headers, v.method, v.url, v.body, StaticKeyResolver({PROFILE: [jwk]}), policy, NOW)
        )
        assert got == ref and ref[0] in ("signature_invalid", "algorithm_unsupported")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda h: replace(h, "Signature-Input", dict(h)["Signature-Input"].replace('"@path" ', "")),
        lambda h: replace(h, "Signature-Input", dict(h)["Signature-Input"] + ";created=1"),
        lambda h: replace(h, "Signature-Input", dict(h)["Signature-Input"].replace("sig1", "sig2")),
        lambda h: replace(h, "Signature", dict(h)["Signature"][:-3] + "A=:"),
        lambda h: replace(h, "Signature", "sig1=::"),
        lambda h: [*h, ("Idempotency-Key", "idem-2")],
        lambda h: replace(h, "Idempotency-Key", "idem-2"),
        lambda h: replace(h, "Content-Type", "text/plain"),
        lambda h: replace(h, "Content-Digest", "sha-512=:" + b64(b"x" * 64) + ":"),
        lambda h: replace(h, "Content-Digest", "md5=:AAAA:"),
        lambda h: [x for x in h if x[0] != "Content-Digest"],
        lambda h: [x for x in h if x[0] != "UCP-Agent"],
        lambda h: replace(h, "Idempotency-Key", "idem\x01"),
        lambda h: replace(h, "Idempotency-Key", "idém"),
    ],
)
async def test_mutations(mutate):
    await assert_same(mutate(signed()), expect_fused=False)


_CHARS = st.sampled_from([*list('abc019=:;"() ,-\t\x01é+/'), "sig1", "keyid", "created", '"@path"'])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["Signature-Input", "Signature", "Content-Digest", "UCP-Agent", "Idempotency-Key"]), st.data())
async def test_random_edits_same_decision(name, data):
    h = signed(extra_params=';nonce="n"')
    value = dict(h)[name]
    i = data.draw(st.integers(0, len(value)))
    j = data.draw(st.integers(i, min(len(value), i + 4)))
    new = value[:i] + "".join(data.draw(st.lists(_CHARS, max_size=3))) + value[j:]
    await assert_same(replace(h, name, new), expect_fused=False, now=NOW + dt.timedelta(seconds=1))


async def test_non_ascii_signature_is_refused_not_500():
    # regression: the reference reader let binascii's ValueError for a non-ASCII value escape (a 500)
    h = replace(signed(), "Signature", "sig1=:é:")
    ref, fused = await compare(h)
    assert ref[0] == "signature_invalid" and fused is None


@pytest.mark.parametrize(
    "x",
    ["A", "A" * 45, "é" * 43, [1, 2], {"a": 1}, "off-curve"],
    ids=["one-char", "45-chars", "non-ascii", "list", "object", "off-curve"],
)
async def test_malformed_key_coordinate_is_profile_malformed_on_both_routes(x):
    """Regression: a caller's profile key with an undecodable or unhashable ``x`` made both routes
    raise binascii.Error / TypeError, answered as a 500; then it (and a point not on its curve) was
    400 algorithm_unsupported. It is a malformed profile: 422 profile_malformed."""
    from ucp_gateway.httpsig.errors import KeyMalformed

    bad = dict(KEY[1], x=KEY[1]["y"] if x == "off-curve" else x)
    headers = signed()
    got = []
    for route in ("reference", "fused"):
        resolver = StaticKeyResolver({PROFILE: [bad]})
        v = view(headers, body=BODY)
        if route == "reference":
            got.append(await outcome(verify_request(v, resolver, POLICY, NOW, MemoryReplayStore())))
        else:
            got.append(await outcome(verify_fused(v.headers, v.method, v.url, v.body, resolver, POLICY, NOW)))
    assert [code for code, _ in got] == ["profile_malformed", "profile_malformed"]
    with pytest.raises(KeyMalformed) as err:
        await verify_request(view(headers, body=BODY), StaticKeyResolver({PROFILE: [bad]}), POLICY, NOW, None)
    assert err.value.http_status == 422


@pytest.mark.parametrize(
    "extra",
    [{"alg": "RS256"}, {"alg": "ES384"}, {"use": "enc"}, {"key_ops": ["sign"]}, {"key_ops": "verify"}],
    ids=["alg-rs256", "alg-other-curve", "use-enc", "key-ops-sign", "key-ops-not-list"],
)
async def test_key_restrictions_are_honoured_on_both_routes(extra):
    """A profile key whose alg/use/key_ops (RFC 7517 §4.2-4.4) rule out verifying ES256 signatures
    is refused with 400 algorithm_unsupported by both routes; the permitted values are accepted."""
    allowed = dict(KEY[1], alg="ES256", use="sig", key_ops=["verify"])
    for jwk, want in ((dict(KEY[1], **extra), "algorithm_unsupported"), (allowed, "ok")):
        got = []
        for route in ("reference", "fused"):
            resolver = StaticKeyResolver({PROFILE: [jwk]})
            v = view(signed(), body=BODY)
            if route == "reference":
                got.append((await outcome(verify_request(v, resolver, POLICY, NOW, MemoryReplayStore())))[0])
            else:
                got.append((await outcome(verify_fused(v.headers, v.method, v.url, v.body, resolver, POLICY, NOW)))[0])
        assert got == [want, want]

"""The aiohttp middleware end to end over real sockets: an independent signer's requests verify,
responses we sign verify with a hand-built base, policies, raw bytes, gzip, canonical paths."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from ucp_gateway.keys import ensure_active_key, published_jwks

from .signer import build_base, digest, raw_verify, sign_request

BODY = b'{"line_items": [{"item": {"id": "rose"}, "quantity": 2}]}'


def signed(env, **kw):
    kw.setdefault("body", BODY)
    kw.setdefault("authority", "shop.example")
    hdrs = sign_request(env.key, profile=env.profile_url, created=int(env.clock.now().timestamp()), **kw)
    return [("Host", kw["authority"]), *hdrs]


async def post(env, path="/checkout-sessions", headers=None, body=BODY, method="POST"):
    from multidict import CIMultiDict
    from yarl import URL

    # encoded=True: send the request-target exactly as written (no dot-segment removal, keep "?")
    url = URL(f"http://127.0.0.1:{env.client.port}{path}", encoded=True)
    return await env.client.session.request(method, url, headers=CIMultiDict(headers or []), data=body)


async def test_independent_signer_is_accepted(env):
    r = await post(env, headers=signed(env))
    assert r.status == 200, await r.text()
    got = await r.json()
    assert got.pop("decoded_len") == len(BODY)
    assert got == {
        "role": "buyer",
        "authenticated": True,
        "kid": "platform-2026",
        "raw_len": len(BODY),
        "raw_hex": BODY[:8].hex(),
    }


async def test_unsigned_request_gets_ucp_error(env):
    r = await post(env, headers=[("Host", "shop.example"), ("UCP-Agent", f'profile="{env.profile_url}"')])
    assert r.status == 401
    assert await r.json() == {"code": "signature_missing", "content": "request is not signed"}


async def test_a_signature_without_created_is_accepted_unless_configured(env):
    """UCP makes ``created`` optional (replay protection is the signed idempotency key), and real
    signers omit it: accepted by default. An operator may refuse it (``httpsig_require_created``)."""
    from ucp_gateway.appkeys import SETTINGS

    hdrs = [("Host", "shop.example"), *sign_request(env.key, profile=env.profile_url, body=BODY, created=None)]
    assert not any("created=" in v for n, v in hdrs if n == "Signature-Input")
    r = await post(env, headers=hdrs)
    assert r.status == 200, await r.text()
    env.app[SETTINGS].httpsig_require_created = True
    r = await post(env, headers=hdrs)
    assert r.status == 401
    assert await r.json() == {"code": "signature_invalid", "content": "signature has no created parameter"}


async def test_tampered_body_is_digest_mismatch(env):
    r = await post(env, headers=signed(env), body=BODY.replace(b"2", b"9"))
    assert r.status == 400 and (await r.json())["code"] == "digest_mismatch"


async def test_unknown_kid_is_key_not_found_after_one_refresh(env):
    hits = env.profile["hits"]
    r = await post(env, headers=signed(env, kid="rotated-away"))
    assert r.status == 401 and (await r.json())["code"] == "key_not_found"
    assert env.profile["hits"] == hits + 2  # first fetch + one forced refresh
    r = await post(env, headers=signed(env, kid="rotated-away"))
    assert r.status == 401
    assert env.profile["hits"] == hits + 2  # refresh floor: no refetch within 60 s


async def test_new_key_found_by_forced_refresh(env):
    from .signer import new_key

    await post(env, headers=signed(env))  # profile cached
    priv2, jwk2 = new_key("platform-2027")
    env.profile["profile"]["signing_keys"].append(jwk2)
    hdrs = [
        ("Host", "shop.example"),
        *sign_request(
            priv2,
            kid="platform-2027",
            profile=env.profile_url,
            body=BODY,
            created=int(env.clock.now().timestamp()),
        ),
    ]
    r = await post(env, headers=hdrs)
    assert r.status == 200 and (await r.json())["kid"] == "platform-2027"


async def test_gzip_body_digest_over_bytes_as_transferred(env):
    gz = gzip.compress(BODY)
    hdrs = signed(env, body=gz, headers=[("Content-Encoding", "gzip"), ("Content-Type", "application/json")])
    r = await post(env, headers=hdrs, body=gz)
    assert r.status == 200, await r.text()
    got = await r.json()
    assert got["raw_hex"] == gz[:8].hex()  # handlers see the raw, undecoded bytes ...
    assert got["decoded_len"] == len(BODY)  # ... and decode them explicitly


async def test_raw_path_with_empty_query_and_encoding(env):
    hdrs = signed(
        env,
        method="GET",
        body=b"",
        path="/checkout-sessions/a%2Fb",
        components=["@method", "@authority", "@path", "@query", "ucp-agent"],
    )
    r = await post(env, path="/checkout-sessions/a%2Fb?", headers=hdrs, body=None, method="GET")
    assert r.status == 200, await r.text()


async def test_dot_segments_refused(env):
    hdrs = signed(env, method="GET", body=b"", path="/a/../checkout-sessions")
    r = await post(env, path="/a/../checkout-sessions", headers=hdrs, body=None, method="GET")
    assert r.status == 400 and (await r.json())["code"] == "invalid_request"


async def test_scheme_and_authority_come_from_config_not_connection(env):
    # the test server speaks plain http on 127.0.0.1:<port>; the signer signed https://shop.example
    assert env.client.server.scheme == "http"
    r = await post(env, headers=signed(env))
    assert r.status == 200


async def test_optional_and_off_policies(env, database):
    async def set_policy(p):
        from ucp_gateway.db import tenant_tx

        async with tenant_tx(database.pool, env.company.id) as conn:
            await conn.execute("UPDATE companies SET signature_policy = $1", p)

    anon = [("Host", "shop.example")]
    await set_policy("optional")
    r = await post(env, headers=anon)
    assert (await r.json())["role"] == "read_only" and (await r.json())["authenticated"] is False
    bad = signed(env)
    bad[-1] = ("Signature", "sig1=:" + base64.b64encode(bytes(64)).decode() + ":")
    assert (await post(env, headers=bad)).status == 401  # signed but invalid: still refused
    assert (await post(env, headers=signed(env))).status == 200
    await set_policy("off")
    assert (await post(env, headers=anon)).status == 200  # dev mode only
    env.app[__import__("ucp_gateway.appkeys", fromlist=["SETTINGS"]).SETTINGS].environment = "production"
    try:
        r = await post(env, headers=anon)
        assert r.status == 401 and (await r.json())["code"] == "signature_missing"  # off fails closed
    finally:
        env.app[__import__("ucp_gateway.appkeys", fromlist=["SETTINGS"]).SETTINGS].environment = "development"


async def test_platform_host_and_exempt_paths_not_verified(env):
    r = await post(env, headers=[("Host", "platform.localhost")])
    assert r.status == 200 and (await r.json())["authenticated"] is None
    r = await post(env, path="/.well-known/ucp", headers=[("Host", "shop.example")], body=None, method="GET")
    assert r.status == 200


async def test_signed_response_verifies_with_hand_built_base(env, database):
    await ensure_active_key(database.pool, env.company.id, now=env.clock.now())
    (pub,) = await published_jwks(database.pool, env.company.id)
    hdrs = signed(env, path="/checkout-sessions/chk_1/complete")
    r = await post(env, path="/checkout-sessions/chk_1/complete", headers=hdrs)
    assert r.status == 200
    body = await r.read()
    assert r.headers["Content-Digest"] == digest(body)
    si = r.headers["Signature-Input"]
    params = si.split("=", 1)[1]
    assert params.startswith(
        '("@status" "content-digest" "content-type" "@method";req "@authority";req "@path";req'
        ' "ucp-agent";req "idempotency-key";req "content-digest";req)'
    )
    assert f'keyid="{pub["kid"]}"' in params and "alg=" not in params
    req_digest = dict(hdrs)["Content-Digest"]
    base = build_base(
        [
            ('"@status"', "200"),
            ('"content-digest"', r.headers["Content-Digest"]),
            ('"content-type"', r.headers["Content-Type"]),
            ('"@method";req', "POST"),
            ('"@authority";req', "shop.example"),
            ('"@path";req', "/checkout-sessions/chk_1/complete"),
            ('"ucp-agent";req', dict(hdrs)["UCP-Agent"]),
            ('"idempotency-key";req', dict(hdrs)["Idempotency-Key"]),
            ('"content-digest";req', req_digest),
        ],
        params,
    )
    sig = base64.b64decode(r.headers["Signature"].split(":")[1])
    raw_verify(pub, base, sig)


async def _accept(env, database, accept: str):
    await ensure_active_key(database.pool, env.company.id, now=env.clock.now())
    (pub,) = await published_jwks(database.pool, env.company.id)
    hdrs = [*signed(env, method="GET", body=b"", path="/checkout-sessions/x"), ("Accept-Signature", accept)]
    r = await post(env, path="/checkout-sessions/x", headers=hdrs, body=None, method="GET")
    assert r.status == 200
    assert "Accept-Signature" in r.headers.getall("Vary")
    return r, pub, dict(hdrs)


def _our_lines(r, hdrs) -> dict[str, str]:
    return {
        '"@status"': "200",
        '"content-digest"': r.headers["Content-Digest"],
        '"content-type"': r.headers["Content-Type"],
        '"@method";req': "GET",
        '"@authority";req': "shop.example",
        '"@path";req': "/checkout-sessions/x",
        '"ucp-agent";req': hdrs["UCP-Agent"],
    }


async def test_accept_signature_may_reorder_and_add_to_our_coverage(env, database):
    """RFC 9421 §5.2: label, a component list containing our coverage, and ``expires`` are honoured."""
    ids = ['"@path";req', '"@status"', '"content-type"', '"content-digest"', '"@method";req', '"@authority";req']
    ids += ['"ucp-agent";req', '"@target-uri";req']
    r, pub, hdrs = await _accept(env, database, f"rsig=({' '.join(ids)});expires")
    si = r.headers["Signature-Input"]
    assert si.startswith(f"rsig=({' '.join(ids)});created=") and ";expires=" in si
    lines = _our_lines(r, hdrs) | {'"@target-uri";req': "https://shop.example/checkout-sessions/x"}
    base = build_base([(c, lines[c]) for c in ids], si.split("=", 1)[1])
    raw_verify(pub, base, base64.b64decode(r.headers["Signature"].split(":")[1]))


@pytest.mark.parametrize(
    "accept",
    [
        "sig1=()",
        'sig1=("@status")',
        'sig1=("@status");tag="ucp-webhook";nonce="n-42"',
        'rsig=("@status" "content-type");nonce="n-42";tag="mine"',
        'sig1=("@method" "@authority" "@path" "content-digest" "content-type" "ucp-agent");tag="ucp-webhook"',
        'sig1=("@status" "content-digest" "content-type" "@method";req "@authority";req "@path";req'
        ' "ucp-agent";req "x-chosen")',
        'sig1=("@status" "content-digest" "content-type" "@method";req "@authority";req "@path";req'
        ' "ucp-agent";req);nonce="chosen";tag="ucp-webhook";keyid="mine";alg="ed25519"',
    ],
)
async def test_accept_signature_never_gets_a_signature_as_asked(env, database, accept):
    """The signing oracle closed: an empty list, ``@status`` alone, a request's components, a field we
    did not choose, a caller's ``nonce``/``tag``/``keyid``: the company key signs only our own coverage
    with our own parameters."""
    r, pub, hdrs = await _accept(env, database, accept)
    si = r.headers["Signature-Input"]
    label, params = si.split("=", 1)
    ours = _our_lines(r, hdrs)
    assert params.startswith("(" + " ".join(ours) + ");created="), si
    assert "nonce=" not in params and "tag=" not in params and "alg=" not in params
    assert f';keyid="{pub["kid"]}"' in params and label == accept.split("=", 1)[0]
    raw_verify(pub, build_base(list(ours.items()), params), base64.b64decode(r.headers["Signature"].split(":")[1]))


async def test_first_signature_bootstraps_the_company_key(env, database):
    path = "/checkout-sessions/chk_1/complete"
    r = await post(env, path=path, headers=signed(env, path=path))
    assert r.status == 200 and "Signature" in r.headers
    (pub,) = await published_jwks(database.pool, env.company.id)
    assert r.headers["Signature-Input"].endswith(f'keyid="{pub["kid"]}"')


async def test_without_kek_ring_signing_fails_closed(db_settings, database, aiohttp_client):
    from ucp_gateway.clock import FrozenClock
    from ucp_gateway.tenancy import create_company

    from .conftest import make_app

    settings = db_settings.model_copy(update={"environment": "production", "kek_ring": None, "kek_file": None})
    await create_company(
        database.pool, slug="opt", display_name="Opt", hostnames=["opt.example"], signature_policy="optional"
    )
    client = await aiohttp_client(make_app(settings, database, FrozenClock()))
    r = await client.post("/checkout-sessions/c/complete", headers={"Host": "opt.example"}, data=b"")
    assert r.status == 500 and (await r.json())["code"] == "config_invalid"
    assert "Signature" not in r.headers
    r = await client.post("/checkout-sessions", headers={"Host": "opt.example"}, data=b"")
    assert r.status == 200  # verification side keeps working


async def test_webhook_signature_verifies_independently(env, database):
    import datetime as dt

    from ucp_gateway.httpsig import sign_webhook_request

    await ensure_active_key(database.pool, env.company.id, now=env.clock.now())
    (pub,) = await published_jwks(database.pool, env.company.id)
    body = json.dumps({"event_id": "ev_1", "order": {"id": "o1"}}).encode()
    h = await sign_webhook_request(
        database.pool,
        env.company.id,
        url="https://platform.example/hooks/orders?x=1",
        body=body,
        ucp_agent='profile="https://shop.example/.well-known/ucp"',
        webhook_id="wh_1",
        webhook_timestamp="1775649600",
        now=env.clock.now() + dt.timedelta(seconds=0),
    )
    params = h["Signature-Input"].split("=", 1)[1]
    comps = [
        "@method",
        "@authority",
        "@path",
        "@query",
        "content-digest",
        "content-type",
        "ucp-agent",
        "webhook-id",
        "webhook-timestamp",
    ]
    assert params.startswith("(" + " ".join(f'"{c}"' for c in comps) + ")")
    vals = {"@method": "POST", "@authority": "platform.example", "@path": "/hooks/orders", "@query": "?x=1"}
    lines = [(f'"{c}"', vals.get(c) or h[next(k for k in h if k.lower() == c)]) for c in comps]
    raw_verify(pub, build_base(lines, params), base64.b64decode(h["Signature"].split(":")[1]))
    assert h["Content-Digest"] == digest(body)


async def test_company_setting_signs_every_response(env, database):
    from ucp_gateway.db import tenant_tx

    await ensure_active_key(database.pool, env.company.id, now=env.clock.now())
    r = await post(env, headers=signed(env))
    assert "Signature" not in r.headers  # not asked for
    async with tenant_tx(database.pool, env.company.id) as conn:
        await conn.execute("UPDATE companies SET settings = '{\"sign_responses\": true}'::jsonb")
    r = await post(env, headers=signed(env))
    assert r.status == 200 and r.headers["Signature-Input"].startswith('sig1=("@status" "content-digest"')


async def test_set_cookie_asked_for_is_not_signed(env, database):
    """A response field we did not choose (here Set-Cookie, whose lines RFC 9421 §2.1.3 would wrap
    as ;bs) is not covered when Accept-Signature asks for it: our own coverage is signed instead."""
    from multidict import CIMultiDict

    from ucp_gateway.httpsig.rfc9421 import ResponseView
    from ucp_gateway.httpsig.signing import sign_response_view
    from ucp_gateway.keys import active_signing_key

    await ensure_active_key(database.pool, env.company.id, now=env.clock.now())
    key = await active_signing_key(database.pool, env.company.id)
    (pub,) = await published_jwks(database.pool, env.company.id)
    headers = CIMultiDict([("Content-Type", "text/plain"), ("Set-Cookie", "a=1, b"), ("Set-Cookie", "c=2")])
    view = ResponseView(200, headers, None, b"ok")
    sign_response_view(view, key, now=env.clock.now(), accept_signature='s=("@status" "set-cookie")')
    si = headers["Signature-Input"]
    assert si.startswith('s=("@status" "content-digest" "content-type");created=')
    lines = [('"@status"', "200"), ('"content-digest"', digest(b"ok")), ('"content-type"', "text/plain")]
    raw_verify(pub, build_base(lines, si.split("=", 1)[1]), base64.b64decode(headers["Signature"].split(":")[1]))


async def _raw_post(env, header_lines: list[tuple[str, bytes]], body: bytes = BODY) -> int:
    """POST over a plain socket, header values sent as the given bytes (no client re-encoding)."""
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", env.client.port)
    head = b"POST /checkout-sessions HTTP/1.1\r\n"
    for name, value in [*header_lines, ("Content-Length", str(len(body)).encode()), ("Connection", b"close")]:
        head += name.encode() + b": " + value + b"\r\n"
    writer.write(head + b"\r\n" + body)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    writer.close()
    return status


async def test_non_ascii_header_lines_read_as_raw_bytes(env):
    hdrs = [(n, v.encode()) for n, v in signed(env)]
    assert await _raw_post(env, hdrs) == 200
    # a non-ASCII line the signature does not cover changes nothing (the view is rebuilt from raw bytes)
    assert await _raw_post(env, [*hdrs, ("X-Note", "caf\u00e9".encode())]) == 200
    # a covered line with a non-ASCII byte is refused as invalid, never a 500
    bad = [(n, v + b"\xe9" if n == "Idempotency-Key" else v) for n, v in hdrs]
    assert await _raw_post(env, bad) == 401


async def test_profile_key_off_its_curve_is_422_profile_malformed(env):
    """A profile key that is not a point on its curve was answered 400 algorithm_unsupported; the
    profile is malformed (UCP overview "Error Handling"): 422 profile_malformed."""
    env.profile["profile"]["signing_keys"] = [dict(env.jwk, y=env.jwk["x"])]
    r = await post(env, headers=signed(env))
    assert r.status == 422 and (await r.json())["code"] == "profile_malformed", await r.text()

"""``private_key_jwt`` client authentication at the token endpoint (RFC 7523 §2.2): a client
registered with its public JWK gets a token with a fresh assertion signed by joserfc, the token
completes a checkout; a wrong, expired, long-lived, replayed, misaddressed, wrong-algorithm or
cross-company assertion is ``invalid_client`` (401 with WWW-Authenticate), never a 500."""

from __future__ import annotations

import time
import uuid

import httpx2
import pytest
from joserfc import jwk, jwt

from tests.access.conftest import PAYMENT, meta, ready_checkout, sdk_session
from ucp_gateway.access import client_jwt
from ucp_gateway.access.credentials import add_credential
from ucp_gateway.clock import SystemClock
from ucp_gateway.discovery.partners import add_partner
from ucp_gateway.tenancy import create_company

HTTP = frozenset({"127.0.0.1"})
TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def _keypair(kind: str = "EC", kid: str = "k1"):
    key = jwk.OKPKey.generate_key("Ed25519") if kind == "OKP" else jwk.ECKey.generate_key("P-256")
    return key, {**key.as_dict(private=False), "kid": kid}


def assertion(key, client_id: str, aud: str, *, alg: str = "ES256", kid: str | None = "k1", **claims) -> str:
    now = int(time.time())
    body = {"iss": client_id, "sub": client_id, "aud": aud, "exp": now + 60, "iat": now, "jti": uuid.uuid4().hex}
    body |= claims
    body = {k: v for k, v in body.items() if v is not None}
    header = {"alg": alg, "typ": "JWT"} | ({"kid": kid} if kid else {})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # EdDSA: joserfc's RFC 9864 SecurityWarning
        return jwt.encode(header, body, key, algorithms=[alg])


@pytest.fixture
async def jwt_client(shop):
    await add_partner(shop.pool, shop.company.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)
    key, public = _keypair()
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(shop.base + "/admin/v1/partners/credentials",
                            headers={"Authorization": f"Bearer {shop.admin}"},
                            json={"kind": "oauth-client", "profile_url": shop.profile, "jwk": public})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["secret"] is None and body["auth_methods"] == ["private_key_jwt"], body
    assert "d" not in body["jwks"]["keys"][0]
    return shop, key, body["id"]


async def _token(shop, form: dict) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(shop.base + "/oauth2/token", data={"grant_type": "client_credentials", **form})


def _form(a: str, **extra) -> dict:
    return {"client_assertion_type": TYPE, "client_assertion": a, **extra}


async def test_a_client_assertion_gets_a_token_that_completes_a_checkout(jwt_client):
    shop, key, cid = jwt_client
    r = await _token(shop, _form(assertion(key, cid, shop.base + "/oauth2/token"), client_id=cid))
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store", r.text
    token = r.json()["access_token"]
    assert (await _token(shop, _form(assertion(key, cid, shop.base)))).status_code == 200  # aud = the issuer
    async with sdk_session(shop.base, headers={"Authorization": f"Bearer {token}"}) as s:
        co = await ready_checkout(s, shop.profile)
        done = await s.call_tool("complete_checkout", {"meta": meta(shop.profile, str(uuid.uuid4())),
                                                       "id": co["id"], "checkout": PAYMENT})  # fmt: skip
    assert done.structured_content["status"] == "completed", done.structured_content
    # RFC 7009 revocation authenticates the same way (aud: the issuer)
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(
            shop.base + "/oauth2/revoke", data={"token": token, **_form(assertion(key, cid, shop.base))}
        )
        assert r.status_code == 200, r.text
        meta_doc = (await http.get(shop.base + "/.well-known/oauth-authorization-server")).json()
    assert "private_key_jwt" in meta_doc["token_endpoint_auth_methods_supported"]
    assert "private_key_jwt" in meta_doc["revocation_endpoint_auth_methods_supported"]
    # RFC 8414 §2: the signing algorithms MUST be listed with private_key_jwt
    assert set(meta_doc["token_endpoint_auth_signing_alg_values_supported"]) == {"ES256", "ES384", "EdDSA", "Ed25519"}


async def test_wrong_expired_replayed_and_foreign_assertions_are_invalid_client(jwt_client, database):
    shop, key, cid = jwt_client
    aud = shop.base + "/oauth2/token"
    other_key, _ = _keypair()
    now = int(time.time())
    hs_key = jwk.OctKey.generate_key(256)

    async def refused(form: dict, why: str) -> None:
        r = await _token(shop, form)
        assert r.status_code == 401, (why, r.status_code, r.text)
        assert r.json()["error"] == "invalid_client" and r.headers["WWW-Authenticate"], (why, r.text)

    await refused(_form(assertion(other_key, cid, aud)), "signed by another key")
    await refused(_form(assertion(key, cid, aud, exp=now - 120)), "expired")
    await refused(_form(assertion(key, cid, aud, exp=now + 3600)), "exp too far ahead")
    await refused(_form(assertion(key, cid, aud, exp=None)), "no exp")
    await refused(_form(assertion(key, cid, aud, jti=None)), "no jti")
    await refused(_form(assertion(key, cid, "https://elsewhere.example/oauth2/token")), "another audience")
    await refused(_form(assertion(key, cid, aud, iss="oc_0000000000000000")), "iss is not sub")
    await refused(_form(assertion(key, cid, aud, kid="k2")), "unknown kid")
    await refused(_form(assertion(key, cid, aud, nbf=now + 600)), "not yet valid")
    await refused(_form(assertion(hs_key, cid, aud, alg="HS256")), "HMAC with no registered secret")
    await refused(_form(assertion(key, cid, aud), client_id="oc_1111111111111111"), "client_id is not sub")
    await refused(_form("not.a.jwt"), "garbage")
    await refused({"client_assertion_type": "urn:other", "client_assertion": assertion(key, cid, aud)}, "wrong type")
    # unsigned ("none") never verifies
    _header, body, _sig = assertion(key, cid, aud).split(".")
    await refused(_form("eyJhbGciOiJub25lIn0." + body + "."), "alg none")
    # single use: the same jti twice
    once = assertion(key, cid, aud)
    assert (await _token(shop, _form(once))).status_code == 200
    await refused(_form(once), "replayed jti")
    # a client with a secret cannot use an assertion, nor mix two methods
    r = await _token(shop, _form(assertion(key, cid, aud), client_secret="ucpcs_x"))
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"
    # another company's client (same partner profile) is not found at this host (RLS)
    other = await create_company(database.pool, slug="jwt-other", display_name="Other", hostnames=["jwt-other.test"])
    await add_partner(database.pool, other.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)
    okey, opub = _keypair()
    foreign, _ = await add_credential(database.pool, other.id, kind="oauth-client", profile_url=shop.profile,
                                      now=SystemClock().now(), jwks={"keys": [opub]})  # fmt: skip
    await refused(_form(assertion(okey, foreign.id, aud)), "another company's client")
    # a revoked client
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(f"{shop.base}/admin/v1/partners/credentials/{cid}/revoke",
                            headers={"Authorization": f"Bearer {shop.admin}"})  # fmt: skip
        assert r.status_code == 200
    await refused(_form(assertion(key, cid, aud)), "revoked client")


async def test_ed25519_keys_and_the_registration_rules(shop):
    # the key registry: public keys of the supported curves only
    okp, okp_pub = _keypair("OKP")
    assert client_jwt.check_jwks(okp_pub)["keys"][0]["crv"] == "Ed25519"  # one JWK becomes a set
    for bad, why in (
        (okp.as_dict(private=True), "private"),
        ({"kty": "RSA", "n": "AQAB", "e": "AQAB"}, "unsupported"),
        ({"kty": "oct", "k": "c2VjcmV0"}, "private or symmetric"),
        ({"keys": []}, "expected"),
        ({"keys": [okp_pub, {**okp_pub}]}, "distinct kids"),
        ({"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA"}, "key 0"),
    ):
        with pytest.raises(ValueError, match=why):
            client_jwt.check_jwks(bad)
    # an Ed25519 client, EdDSA (what clients send today) and Ed25519 (RFC 9864) alike
    aud = "https://shop.example"
    jwks = client_jwt.check_jwks({"keys": [okp_pub]})
    now = int(time.time())
    for alg in ("EdDSA", "Ed25519"):
        v = client_jwt.verify_assertion(assertion(okp, "oc_x", aud, alg=alg), jwks, client_id="oc_x",
                                        audiences={aud}, now=now)  # fmt: skip
        assert v.client_id == "oc_x" and v.jti
    ec, _ = _keypair()
    with pytest.raises(client_jwt.AssertionRefused, match="alg"):  # ES256 header on an Ed25519 key
        client_jwt.verify_assertion(assertion(ec, "oc_x", aud), jwks, client_id="oc_x", audiences={aud}, now=now)


async def test_used_jtis_live_until_their_assertion_expires_then_the_scheduler_drops_them(jwt_client, database):
    """A jti is kept exp + SKEW (a replay before that is refused); the key scheduler's round deletes
    exactly the expired replay rows, the live ones stay."""
    import datetime as dt

    from ucp_gateway.db import platform_tx
    from ucp_gateway.keys import scheduler

    shop, key, cid = jwt_client
    aud = shop.base + "/oauth2/token"
    exp = int(time.time()) + 60
    short, long_ = assertion(key, cid, aud, exp=exp, jti="short"), assertion(key, cid, aud, exp=exp + 200, jti="long")
    for a in (short, long_):
        assert (await _token(shop, _form(a))).status_code == 200
    async with platform_tx(database.pool) as conn:
        rows = dict(
            await conn.fetch("SELECT nonce, expires_at FROM signature_nonces WHERE keyid LIKE 'private_key_jwt:%'")
        )
    assert set(rows) == {"short", "long"}
    assert abs(rows["short"].timestamp() - (exp + client_jwt.SKEW)) <= 2
    after_short = dt.datetime.fromtimestamp(exp + client_jwt.SKEW + 5, dt.UTC)
    await scheduler.run_once(database.pool, now=after_short, publish_min=3600, rotating_grace=3600)
    async with platform_tx(database.pool) as conn:
        left = [
            r[0] for r in await conn.fetch("SELECT nonce FROM signature_nonces WHERE keyid LIKE 'private_key_jwt:%'")
        ]
    assert left == ["long"]

"""Operator blocks and profile purges (httpsig.blocks): a blocked key (by kid or RFC 7638
thumbprint) or profile is refused, lifting the block lets it back in, a purge drops a cached
profile so a key its owner removed stops verifying at once; over the admin API on real sockets."""

from __future__ import annotations

import datetime as dt

from ucp_gateway.httpsig.blocks import jwk_thumbprint
from ucp_gateway.httpsig.web import BLOCK_CACHE
from ucp_gateway.keys import create_admin_token

from .signer import new_key
from .test_middleware import post, signed


def test_thumbprint_is_rfc7638():
    # RFC 7638 §3.1 gives an RSA example; for EC the members are crv, kty, x, y in that order
    jwk = {"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
           "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0", "kid": "ignored", "use": "sig"}  # fmt: skip
    from ucp_gateway.keys.rfc7638 import thumbprint

    assert jwk_thumbprint(jwk) == thumbprint(jwk)
    assert jwk_thumbprint({"kty": "EC", "crv": "P-256", "x": 1, "y": "a"}) is None
    assert jwk_thumbprint({"kty": "oct", "k": "a"}) is None


async def _admin(env, database):
    token, _ = await create_admin_token(database.pool, env.company.id, "admin", now=dt.datetime.now(dt.UTC))

    async def call(method, path, body=None):
        h = {"Host": "shop.example", "Authorization": f"Bearer {token}"}
        r = await env.client.request(method, path, json=body, headers=h)
        return r.status, await r.json()

    return call


async def test_blocked_key_and_profile_are_refused_and_unblocking_restores(env, database):
    env.app[BLOCK_CACHE].ttl = 0  # re-read on every request here; the two-process test holds the 2 s
    call = await _admin(env, database)
    assert (await post(env, headers=signed(env))).status == 200
    for kind, value in (("kid", env.jwk["kid"]), ("thumbprint", jwk_thumbprint(env.jwk)), ("profile", env.profile_url)):
        status, body = await call("POST", "/admin/v1/blocks", {"kind": kind, "value": value, "reason": "abuse"})
        assert status == 200 and body["block"]["created_by"].startswith("token:"), body
        r = await post(env, headers=signed(env))
        assert r.status == 401 and (await r.json())["code"] == "key_not_found", (kind, await r.text())
        status, body = await call("GET", "/admin/v1/blocks")
        assert [(b["kind"], b["value"], b["reason"]) for b in body["blocks"]] == [(kind, value, "abuse")]
        assert (await call("POST", "/admin/v1/blocks/remove", {"kind": kind, "value": value}))[0] == 200
        assert (await post(env, headers=signed(env))).status == 200, kind
    assert (await call("POST", "/admin/v1/blocks/remove", {"kind": "kid", "value": "nope"}))[0] == 404
    for bad in ({"kind": "ip", "value": "1.2.3.4"}, {"kind": "kid", "value": ""}, {"kind": "kid"}):
        assert (await call("POST", "/admin/v1/blocks", bad))[0] == 400, bad


async def test_purge_drops_a_key_its_owner_removed(env, database):
    env.app[BLOCK_CACHE].ttl = 0
    call = await _admin(env, database)
    assert (await post(env, headers=signed(env))).status == 200
    # the owner replaces its key: the cached profile still lists the old one, which keeps verifying
    env.profile["profile"]["signing_keys"] = [new_key("platform-2027")[1]]
    hits = env.profile["hits"]
    assert (await post(env, headers=signed(env))).status == 200 and env.profile["hits"] == hits
    assert (await call("POST", "/admin/v1/profiles/purge", {"profile_url": env.profile_url})) == (
        200,
        {"purged": env.profile_url},
    )
    r = await post(env, headers=signed(env))
    assert r.status == 401 and env.profile["hits"] > hits, await r.text()  # fetched again, key gone

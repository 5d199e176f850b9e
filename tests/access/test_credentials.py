"""API keys and OAuth 2.0 client credentials: the official MCP SDK client completes a checkout with
each on a shop that refuses unsigned calls; every wrong, revoked, expired or cross-company proof is
refused with its status and code, never downgraded, never a 500."""

from __future__ import annotations

import base64
import uuid

import httpx2
import pytest

from tests.access.conftest import PAYMENT, meta, ready_checkout, sdk_session
from ucp_gateway.discovery.partners import add_partner
from ucp_gateway.tenancy import create_company

HTTP = frozenset({"127.0.0.1"})


async def _credential(shop, kind: str, profile: str | None = None) -> dict:
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(shop.base + "/admin/v1/partners/credentials",
                            headers={"Authorization": f"Bearer {shop.admin}"},
                            json={"kind": kind, "profile_url": profile or shop.profile, "label": "test"})  # fmt: skip
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
async def partnered(shop):
    await add_partner(shop.pool, shop.company.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)
    assert shop.company.signature_policy == "required"
    return shop


async def _token(shop, client: dict, *, basic: bool = True, json_body: bool = False) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        if basic:
            auth = base64.b64encode(f"{client['id']}:{client['secret']}".encode()).decode()
            return await http.post(shop.base + "/oauth2/token", data={"grant_type": "client_credentials"},
                                   headers={"Authorization": f"Basic {auth}"})  # fmt: skip
        body = {"grant_type": "client_credentials", "client_id": client["id"], "client_secret": client["secret"]}
        if json_body:
            return await http.post(shop.base + "/oauth2/token", json=body)
        return await http.post(shop.base + "/oauth2/token", data=body)


async def _complete_with(shop, headers: dict) -> dict:
    async with sdk_session(shop.base, headers=headers) as s:
        co = await ready_checkout(s, shop.profile)
        done = await s.call_tool("complete_checkout", {"meta": meta(shop.profile, str(uuid.uuid4())),
                                                       "id": co["id"], "checkout": PAYMENT})  # fmt: skip
        return done.structured_content


async def test_sdk_client_completes_with_an_api_key(partnered):
    shop = partnered
    key = await _credential(shop, "api-key")
    assert key["secret"].startswith("ucpak_") and key["id"].startswith("ak_")
    body = await _complete_with(shop, {"X-API-Key": key["secret"]})
    assert body["status"] == "completed" and body["order"]["id"], body
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.get(shop.base + "/ucp/v1/orders/" + body["order"]["id"],
                           headers={"X-API-Key": key["secret"], "UCP-Agent": f'profile="{shop.profile}"'})  # fmt: skip
        assert r.status_code == 200 and r.headers["UCP-Access-Level"] == "identified", r.text
        listing = await http.get(shop.base + "/admin/v1/partners/credentials",
                                 headers={"Authorization": f"Bearer {shop.admin}"})  # fmt: skip
    assert key["secret"] not in listing.text and listing.json()["credentials"][0]["auth_methods"] == ["x-api-key"]


async def test_sdk_client_completes_with_an_oauth_client_credentials_token(partnered):
    shop = partnered
    client = await _credential(shop, "oauth-client")
    r = await _token(shop, client)
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store", r.text
    tok = r.json()
    assert tok["token_type"] == "Bearer" and tok["expires_in"] == 900 and tok["scope"] == "ucp"
    for kw in ({"basic": False}, {"basic": False, "json_body": True}):  # client_secret_post, form and JSON
        assert (await _token(shop, client, **kw)).status_code == 200
    body = await _complete_with(shop, {"Authorization": f"Bearer {tok['access_token']}"})
    assert body["status"] == "completed", body
    async with httpx2.AsyncClient(timeout=30) as http:
        meta_doc = (await http.get(shop.base + "/.well-known/oauth-authorization-server")).json()
    assert meta_doc["issuer"] == shop.base and meta_doc["token_endpoint"] == shop.base + "/oauth2/token"
    assert meta_doc["grant_types_supported"] == ["client_credentials"]
    assert "client_secret_basic" in meta_doc["token_endpoint_auth_methods_supported"]


async def test_wrong_revoked_expired_and_foreign_proofs_are_refused(partnered, database):
    shop = partnered
    hdrs = {"UCP-Agent": f'profile="{shop.profile}"'}
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    key = await _credential(shop, "api-key")
    client = await _credential(shop, "oauth-client")
    token = (await _token(shop, client)).json()["access_token"]
    other = await create_company(database.pool, slug="other-shop", display_name="Other", hostnames=["other.test"])
    await add_partner(database.pool, other.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)

    async def post(extra: dict) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=30) as http:
            return await http.post(shop.base + "/ucp/v1/checkout-sessions", json=create, headers={**hdrs, **extra})

    ok = await post({"X-API-Key": key["secret"]})
    assert ok.status_code == 201 and ok.headers["UCP-Access-Level"] == "identified", ok.text
    for bad in ({"X-API-Key": "ucpak_wrong"}, {"Authorization": "Bearer ucpot_wrong"},
                {"Authorization": "Bearer some.jwt.token"}):  # fmt: skip
        r = await post(bad)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized" and "WWW-Authenticate" in r.headers, bad
    # another company's credential is not found at this one (RLS), same answer
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(shop.base + "/admin/v1/partners/credentials",
                            headers={"Authorization": f"Bearer {shop.admin}"},
                            json={"kind": "api-key", "profile_url": "http://127.0.0.1:1/nobody.json"})  # fmt: skip
    assert r.status_code == 400  # no such partner
    from ucp_gateway.access.credentials import add_credential
    from ucp_gateway.clock import SystemClock

    _, foreign = await add_credential(database.pool, other.id, kind="api-key", profile_url=shop.profile,
                                      now=SystemClock().now())  # fmt: skip
    r = await post({"X-API-Key": foreign})
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    # the credential names another platform than UCP-Agent: identity binding refuses it
    r = await post({"X-API-Key": key["secret"], "UCP-Agent": 'profile="https://elsewhere.example/p.json"'})
    assert r.status_code == 401
    # wrong client secret, unknown client, unsupported grant
    r = await _token(shop, {**client, "secret": "ucpcs_wrong"})
    assert r.status_code == 401 and r.json()["error"] == "invalid_client"
    assert r.headers["WWW-Authenticate"] == 'Basic realm="ucp"'
    r = await _token(shop, {**client, "id": "oc_0000000000000000"}, basic=False)
    assert r.status_code == 401 and r.json()["error"] == "invalid_client"
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(shop.base + "/oauth2/token", data={"grant_type": "password"})
        assert r.status_code == 400 and r.json()["error"] == "unsupported_grant_type"
        r = await http.post(shop.base + "/oauth2/token", data={"grant_type": "client_credentials", "scope": "root",
                            "client_id": client["id"], "client_secret": client["secret"]})  # fmt: skip
        assert r.status_code == 400 and r.json()["error"] == "invalid_scope"
    # an expired token
    assert (await post({"Authorization": f"Bearer {token}"})).status_code == 201
    await shop.set("UPDATE oauth_access_tokens SET expires_at = issued_at WHERE company_id = $1")
    r = await post({"Authorization": f"Bearer {token}"})
    assert r.status_code == 401 and 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    # RFC 7009 revocation by the client, then revoking the client kills its other tokens
    fresh = (await _token(shop, client)).json()["access_token"]
    other_tok = (await _token(shop, client)).json()["access_token"]
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(shop.base + "/oauth2/revoke", data={"token": fresh, "client_id": client["id"],
                                                                  "client_secret": client["secret"]})  # fmt: skip
        assert r.status_code == 200
    assert (await post({"Authorization": f"Bearer {fresh}"})).status_code == 401
    assert (await post({"Authorization": f"Bearer {other_tok}"})).status_code == 201
    async with httpx2.AsyncClient(timeout=30) as http:
        for cred in (client, key):
            r = await http.post(f"{shop.base}/admin/v1/partners/credentials/{cred['id']}/revoke",
                                headers={"Authorization": f"Bearer {shop.admin}"})  # fmt: skip
            assert r.status_code == 200 and r.json()["revoked_at"]
    assert (await post({"Authorization": f"Bearer {other_tok}"})).status_code == 401
    assert (await post({"X-API-Key": key["secret"]})).status_code == 401
    assert (await _token(shop, client)).status_code == 401  # a revoked client gets no token

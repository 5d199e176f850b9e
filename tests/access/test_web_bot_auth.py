"""Web Bot Auth against a real key directory on loopback, with real Ed25519 and P-256 keys: a
registered directory or one on the profile's origin is ``identified``, any other verified bot is
anonymous (refused where the policy needs a platform); every wrong proof is a 401 with
WWW-Authenticate, never a downgrade; an unreachable directory is a 503 with Retry-After."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import httpx2
import pytest

from tests.access.wba import AgentHost, Bot
from ucp_gateway.access.credentials import add_credential, revoke_credential
from ucp_gateway.discovery.partners import add_partner

HTTP = frozenset({"127.0.0.1"})
NOW = dt.datetime.now


@pytest.fixture
async def bots():
    ed, p256 = Bot("Ed25519"), Bot("P-256")
    host = await AgentHost([ed.jwk, p256.jwk]).start()
    try:
        yield host, ed, p256
    finally:
        await host.runner.cleanup()


def _order_url(shop) -> str:
    return shop.base + "/ucp/v1/orders/ord_missing"


async def _get(url: str, headers: dict) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.get(url, headers=headers)


def _order_read_ran(r: httpx2.Response) -> bool:
    return r.status_code == 200 and r.json()["messages"][0]["code"] == "not_found"


def _agent(profile: str) -> dict:
    return {"UCP-Agent": f'profile="{profile}"'}


async def test_directory_on_the_profile_origin_is_identified_ed25519_and_p256(shop, bots):
    host, ed, p256 = bots
    profile = host.base + "/profile/a.json"
    url = _order_url(shop)
    for bot in (ed, p256):
        r = await _get(url, bot.sign("GET", url, host.base, headers=_agent(profile)))
        # identified: the order read runs (no such order: a UCP not_found answer) instead of a 401
        assert _order_read_ran(r) and r.headers["UCP-Access-Level"] == "identified", r.text
    assert host.directory_hits == 1  # cached


async def test_registered_directory_names_its_partner(shop, bots):
    host, ed, _ = bots
    partner = shop.profile  # the partner's own profile lives elsewhere than the directory
    await add_partner(shop.pool, shop.company.id, profile_url=partner, role="buyer", http_hosts=HTTP)
    cred, secret = await add_credential(shop.pool, shop.company.id, kind="web-bot-auth", profile_url=partner,
                                        now=NOW(dt.UTC), identity=host.base + "/")  # fmt: skip
    assert secret is None and cred.identity == host.base and cred.id.startswith("wb_")
    url = _order_url(shop)
    r = await _get(url, ed.sign("GET", url, host.base, headers=_agent(partner)))
    assert _order_read_ran(r) and r.headers["UCP-Access-Level"] == "identified", r.text
    # a checkout created with it (body, digest, idempotency key covered)
    body = json.dumps({"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}).encode()
    curl = shop.base + "/ucp/v1/checkout-sessions"
    h = ed.sign("POST", curl, host.base, body=body, headers={**_agent(partner), "Idempotency-Key": str(uuid.uuid4())})
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(curl, content=body, headers=h)
    assert r.status_code == 201 and r.headers["UCP-Access-Level"] == "identified", r.text
    # identity binding: the registered directory acts for its partner only
    other = host.base + "/profile/a.json"
    r = await _get(url, ed.sign("GET", url, host.base, headers=_agent(other)))
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer"), r.text
    # revoked: the directory is no longer the partner's (and not the partner profile's origin)
    await revoke_credential(shop.pool, shop.company.id, cred.id, now=NOW(dt.UTC))
    r = await _get(url, ed.sign("GET", url, host.base, headers=_agent(partner)))
    assert r.status_code == 401 and r.json()["code"] == "signature_missing", r.text


async def test_unbound_verified_bot_is_anonymous_under_optional_refused_under_required(shop, bots):
    host, ed, _ = bots
    url = _order_url(shop)
    minimal = ed.sign("GET", url, host.base, headers=_agent(shop.profile), ucp=False)  # @authority + agent only
    r = await _get(url, minimal)
    assert r.status_code == 401 and r.json()["code"] == "signature_missing", r.text
    assert "WWW-Authenticate" in r.headers
    await shop.policy("optional")
    r = await _get(url, ed.sign("GET", url, host.base, headers=_agent(shop.profile), ucp=False))
    # served as anonymous: the order read needs identified
    assert r.status_code == 401 and r.headers["UCP-Access-Level"] == "anonymous", r.text
    assert r.json()["code"] == "unauthorized"
    # full coverage, but the directory is neither registered nor on the profile's origin
    r = await _get(url, ed.sign("GET", url, host.base, headers=_agent(shop.profile)))
    assert r.status_code == 401 and r.headers["UCP-Access-Level"] == "anonymous", r.text


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("wrong_key", "signature_invalid"),
        ("unknown_keyid", "key_not_found"),
        ("expired", "signature_invalid"),
        ("long_window", "signature_invalid"),
        ("future", "signature_invalid"),
        ("agent_uncovered", "signature_invalid"),
        ("no_agent", "signature_invalid"),
        ("no_expires", "signature_invalid"),
    ],
)
async def test_wrong_proofs_are_refused_never_downgraded(shop, bots, case, code):
    host, ed, _ = bots
    await shop.policy("optional")  # an unsigned call would pass: a wrong proof still may not
    profile = host.base + "/profile/a.json"
    url = _order_url(shop)
    h = _agent(profile)
    now = dt.datetime.now(dt.UTC)
    if case == "wrong_key":
        headers = Bot("Ed25519").sign("GET", url, host.base, headers=h, kid=ed.kid)  # the kid of another key
    elif case == "unknown_keyid":
        headers = Bot("P-256").sign("GET", url, host.base, headers=h)
    elif case == "expired":
        headers = ed.sign("GET", url, host.base, headers=h, created=now - dt.timedelta(seconds=90), lifetime=30)
    elif case == "long_window":
        headers = ed.sign("GET", url, host.base, headers=h, lifetime=86400)
    elif case == "future":
        headers = ed.sign("GET", url, host.base, headers=h, created=now + dt.timedelta(seconds=120))
    elif case == "agent_uncovered":
        headers = ed.sign("GET", url, host.base, headers=h, cover_agent=False)
    elif case == "no_agent":
        headers = ed.sign("GET", url, None, headers=h)
    else:
        headers = ed.sign("GET", url, host.base, headers=h)
        headers["Signature-Input"] = headers["Signature-Input"].replace(";expires=", ";x=")
        headers["Signature-Input"] = headers["Signature-Input"].split(";x=")[0] + ';tag="web-bot-auth"'
    r = await _get(url, headers)
    assert r.status_code == 401 and r.json()["code"] == code, (case, r.text)
    assert r.headers["WWW-Authenticate"].startswith("Bearer"), r.headers


async def test_replayed_nonce_is_refused(shop, bots):
    host, _, p256 = bots
    profile = host.base + "/profile/a.json"
    url = _order_url(shop)
    headers = p256.sign("GET", url, host.base, headers=_agent(profile), nonce="n-" + uuid.uuid4().hex)
    assert _order_read_ran(await _get(url, headers))
    r = await _get(url, headers)
    assert r.status_code == 401 and "nonce" in r.json()["content"], r.text


async def test_wrong_tag_is_not_web_bot_auth(shop, bots):
    host, ed, _ = bots
    profile = host.base + "/profile/a.json"
    url = _order_url(shop)
    # the same signature under another tag is an RFC 9421 signature against the UCP profile's
    # keys, which do not list it: refused, never read as Web Bot Auth
    r = await _get(url, ed.sign("GET", url, host.base, headers=_agent(profile), tag="not-web-bot-auth"))
    assert r.status_code == 401 and r.json()["code"] == "key_not_found", r.text
    assert host.directory_hits == 0


async def test_directory_outage_is_503_wrong_directory_is_401(shop, bots):
    host, ed, _ = bots
    profile = host.base + "/profile/a.json"
    url = _order_url(shop)
    host.directory_status = 404
    r = await _get(url, ed.sign("GET", url, host.base, headers=_agent(profile)))
    assert r.status_code == 401 and r.json()["code"] == "key_not_found", r.text
    shop.app[__import__("ucp_gateway.access.webbotauth", fromlist=["x"]).DIRECTORY_FETCHER].purge(
        host.base + "/.well-known/http-message-signatures-directory"
    )
    host.directory_status = 200
    host.media_type = "text/html"
    r = await _get(url, ed.sign("GET", url, host.base, headers=_agent(profile)))
    assert r.status_code == 401 and r.json()["code"] == "key_not_found", r.text
    # a directory on a port nobody listens on: we cannot verify now; retry later
    gone = "http://127.0.0.1:9"
    r = await _get(url, ed.sign("GET", url, gone, headers=_agent(profile)))
    assert r.status_code == 503 and r.headers["Retry-After"], r.text
    assert r.json()["code"] == "directory_unavailable"


async def test_legacy_string_jwks_uri_and_a_rotated_key(shop, bots):
    host, ed, _ = bots
    profile = host.base + "/profile/a.json"
    url = _order_url(shop)
    # the legacy bare sf-string form, covered whole
    r = await _get(url, ed.sign("GET", url, None, headers=_agent(profile), agent_header=f'"{host.base}"'))
    assert _order_read_ran(r) and r.headers["UCP-Access-Level"] == "identified", r.text
    # a JWKS URL named as such (type=jwks_uri), fetched as it is
    header = f'sig1="{host.base}/jwks.json";type=jwks_uri'
    r = await _get(url, ed.sign("GET", url, None, headers=_agent(profile), agent_header=header))
    assert _order_read_ran(r), r.text
    r = await _get(
        url, ed.sign("GET", url, None, headers=_agent(profile), agent_header=f'sig1="{host.base}";type=cimd')
    )
    assert r.status_code == 401 and "not supported" in r.json()["content"], r.text
    # a key added to the directory after it was cached: the unknown keyid refetches it once
    hits, fresh = host.directory_hits, Bot("Ed25519")
    host.keys.append(fresh.jwk)
    r = await _get(url, fresh.sign("GET", url, host.base, headers=_agent(profile)))
    assert _order_read_ran(r) and host.directory_hits == hits + 1, r.text
    # another unknown keyid within the TTL floor: no second refetch, refused
    r = await _get(url, Bot("Ed25519").sign("GET", url, host.base, headers=_agent(profile)))
    assert r.status_code == 401 and host.directory_hits == hits + 1, r.text


async def test_directory_on_a_special_use_address_is_never_fetched(shop, bots):
    _, ed, _ = bots
    url = _order_url(shop)
    for agent in ("https://10.0.0.1", "https://169.254.169.254", "http://example.com"):
        r = await _get(url, ed.sign("GET", url, agent, headers=_agent(shop.profile)))
        assert r.status_code == 401 and r.json()["code"] == "key_not_found", (agent, r.text)


async def test_beside_an_api_key_the_web_bot_auth_signature_is_checked_too(shop, bots):
    host, ed, _ = bots
    await add_partner(shop.pool, shop.company.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)
    _, key = await add_credential(shop.pool, shop.company.id, kind="api-key", profile_url=shop.profile,
                                  now=NOW(dt.UTC))  # fmt: skip
    url = _order_url(shop)
    h = {**_agent(shop.profile), "X-API-Key": key}
    # a verified bot (its directory is nobody's here) on a request the API key identifies: identified
    r = await _get(url, ed.sign("GET", url, host.base, headers=h))
    assert _order_read_ran(r) and r.headers["UCP-Access-Level"] == "identified", r.text
    # a wrong Web Bot Auth signature beside the right API key: refused, not ignored
    r = await _get(url, Bot("Ed25519").sign("GET", url, host.base, headers=h, kid=ed.kid))
    assert r.status_code == 401 and r.json()["code"] == "signature_invalid", r.text
    # a registered directory of another partner beside the API key: the proofs name two platforms
    other = host.base + "/profile/a.json"
    await add_partner(shop.pool, shop.company.id, profile_url=other, role="buyer", http_hosts=HTTP)
    await add_credential(shop.pool, shop.company.id, kind="web-bot-auth", profile_url=other, now=NOW(dt.UTC),
                         identity=host.base)  # fmt: skip
    r = await _get(url, ed.sign("GET", url, host.base, headers={"X-API-Key": key}))
    assert r.status_code == 401 and "different platforms" in r.json()["content"], r.text

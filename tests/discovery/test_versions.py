"""Every served version's profile: the 2026-08-25 root names the 2026-04-08 leaf, both served with
the same hosting rules, each valid against its own version's official models (tests/ucp_models.py)."""

from __future__ import annotations

import json

import pytest
from joserfc.jwk import ECKey, OKPKey

from ucp_gateway.app import create_app
from ucp_gateway.clock import FrozenClock
from ucp_gateway.discovery.web import KEYS_PROVIDER
from ucp_gateway.middleware import PUBLIC_FAST_PATHS
from ucp_gateway.tenancy import create_company
from ucp_gateway.versions import ROOT, SERVED, VERSIONS

from ..ucp_models import validate
from .conftest import new_jwk

LEAF = "2026-04-08"


def _keys():
    ec = new_jwk("ec-1")
    p384 = ECKey.generate_key("P-384", parameters={"kid": "ec-384"}).as_dict(private=False)
    ed = OKPKey.generate_key("Ed25519", parameters={"kid": "ed-1"}).as_dict(private=False)
    return [ec, p384, ed]


KEYS = _keys()


async def _published(pool, company_id):
    return KEYS


@pytest.fixture
async def gw(aiohttp_client, database, db_settings):
    await create_company(database.pool, slug="shop", display_name="Shop", hostnames=["shop.test"])
    app = create_app(db_settings, clock=FrozenClock(), database=database)
    app[KEYS_PROVIDER] = _published
    return await aiohttp_client(app)


def _hosting(resp) -> str:
    assert resp.status == 200, resp.status
    cc = resp.headers["Cache-Control"]
    assert cc.startswith("public, max-age=") and int(cc.split("=")[1]) >= 60
    assert not any(bad in cc for bad in ("private", "no-store", "no-cache"))
    etag = resp.headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    return etag


@pytest.mark.parametrize("host", ["shop.test", "platform.test"])  # a company, the platform node
async def test_root_names_each_leaf_and_every_document_is_hosted_alike(gw, host) -> None:
    root_resp = await gw.get("/.well-known/ucp", headers={"Host": host}, allow_redirects=False)
    _hosting(root_resp)
    root = await root_resp.json()
    assert root["ucp"]["version"] == ROOT
    kind = "business_profile"
    assert validate(kind, root) == ROOT
    leaves = root["ucp"]["supported_versions"]
    assert leaves == {v: f"https://{host}{VERSIONS[v].profile_path}" for v in SERVED if v != ROOT}
    for version, url in leaves.items():
        path = url.removeprefix(f"https://{host}")
        resp = await gw.get(path, headers={"Host": host}, allow_redirects=False)
        etag = _hosting(resp)
        leaf = await resp.json()
        assert leaf["ucp"]["version"] == version  # a platform MUST check the leaf's version = key
        assert validate(kind, leaf) == version  # the 2026-04-08 models (ucp-sdk 0.4.6)
        assert "supported_versions" not in leaf["ucp"]
        again = await gw.get(path, headers={"Host": host, "If-None-Match": etag})
        assert again.status == 304 and again.headers["ETag"] == etag and not await again.read()
    # the leaf is its own document: its own ETag and bytes
    assert root_resp.headers["ETag"] != resp.headers["ETag"]


async def test_dev_ucp_entries_declare_their_document_version_only(gw) -> None:
    for version in SERVED:
        doc = json.loads(await (await gw.get(VERSIONS[version].profile_path, headers={"Host": "shop.test"})).read())
        ucp = doc["ucp"]
        entries = [
            e
            for reg in ("services", "capabilities")
            for n, es in ucp[reg].items()
            if n.startswith("dev.ucp.")
            for e in es
        ]
        assert entries and {e["version"] for e in entries} == {version}  # snapshot rule (OV)
        assert "services" in ucp and "payment_handlers" in ucp


async def test_key_lists_per_version(gw) -> None:
    root = await (await gw.get("/.well-known/ucp", headers={"Host": "shop.test"})).json()
    leaf = await (await gw.get(f"/.well-known/ucp/{LEAF}", headers={"Host": "shop.test"})).json()
    assert [k["kid"] for k in root["keys"]] == ["ec-1", "ec-384", "ed-1"]  # the JWK Set: EC and OKP
    assert [k["kid"] for k in root["signing_keys"]] == ["ec-1"]  # the ES256 mirror for 04-08 verifiers
    assert [k["kid"] for k in leaf["signing_keys"]] == ["ec-1", "ec-384"] == [k["kid"] for k in leaf["keys"]]
    (handler,) = root["ucp"]["payment_handlers"].values()
    assert handler[0]["available_instruments"][0]["constraints"] == {
        "properties": {"brand": {"enum": ["visa", "mastercard"]}}
    }
    assert root["ucp"]["map_order"] == {"payment_handlers": list(root["ucp"]["payment_handlers"])}


async def test_leaf_fast_path_answers_the_full_paths_bytes(gw) -> None:
    path = f"/.well-known/ucp/{LEAF}"
    app = gw.server.app
    assert path in app[PUBLIC_FAST_PATHS]
    first = await gw.get(path, headers={"Host": "shop.test"})  # renders and caches
    body = await first.read()
    saved = app[PUBLIC_FAST_PATHS].pop(path)
    try:
        slow = await gw.get(path, headers={"Host": "shop.test"})
        slow_body, slow_headers = await slow.read(), {k: v for k, v in slow.headers.items() if k != "Date"}
    finally:
        app[PUBLIC_FAST_PATHS][path] = saved
    answered = []
    app[PUBLIC_FAST_PATHS][path] = type(saved)(saved.handler, lambda r, h: answered.append(1) or saved.answer(r, h))
    try:
        fast = await gw.get(path, headers={"Host": "shop.test"})
        fast_body, fast_headers = await fast.read(), {k: v for k, v in fast.headers.items() if k != "Date"}
    finally:
        app[PUBLIC_FAST_PATHS][path] = saved
    assert answered == [1] and fast_body == slow_body == body
    fast_headers.pop("Request-Id"), slow_headers.pop("Request-Id")
    assert fast_headers == slow_headers


async def test_unknown_version_path_is_404(gw) -> None:
    for path in ("/.well-known/ucp/2026-01-23", "/.well-known/ucp/draft"):
        resp = await gw.get(path, headers={"Host": "shop.test"})
        assert resp.status == 404

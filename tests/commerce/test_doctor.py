"""``ucp-gateway doctor`` as a merchant runs it (a real process): the demo business passes, with one
signed create-checkout round trip, and each defect of a set of broken profiles served here is
found and named."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import json
from types import SimpleNamespace

import pytest
from aiohttp import web
from multidict import CIMultiDict

from ucp_gateway.db import tenant_tx
from ucp_gateway.httpsig.jwkalg import der_signature
from ucp_gateway.httpsig.rfc9421 import RequestView, ResponseView
from ucp_gateway.httpsig.signing import sign_response_view
from ucp_gateway.toolkit.doctor import check_document, check_endpoint, check_key, probe_url
from ucp_gateway.transports.agentkey import agent_key_from_jwk, generate_agent_jwk
from ucp_gateway.versions import capability_entries

from ..test_cli import run
from .conftest import make_app, started


def doctor(*args: str):
    return run(["doctor", *args, "--json"], {"UCPGW_ENVIRONMENT": "development"})


def worst(p) -> tuple[int, dict[str, list[str]]]:
    out = json.loads(p.stdout)
    by: dict[str, list[str]] = {}
    for f in out["findings"]:
        by.setdefault(f["severity"], []).append(f["check"])
    return p.returncode, by


@pytest.fixture
async def shop(aiohttp_client, database, db_settings, company):
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'required' WHERE id = $1", company.id)
    return await started(aiohttp_client, make_app(database, db_settings, public_scheme="http"), database, company)


async def test_the_demo_business_passes_with_a_signed_round_trip(shop):
    url = str(shop.make_url("/.well-known/ucp"))
    p = await asyncio.to_thread(doctor, url, "--allow-http", "--roundtrip", "pot_ceramic")
    code, by = worst(p)
    assert "error" not in by, p.stdout
    # plain http on loopback: the one warning, once per document (the root and its 2026-04-08 leaf)
    assert code == 1 and by["warning"] == ["https", "https"]
    assert {"hosting", "key", "endpoint", "roundtrip", "response_signature"} <= set(by["ok"])


KEY = generate_agent_jwk("ES256")
PUB = {k: v for k, v in KEY.items() if k != "d"}


def _doc(base: str, version: str = "2026-04-08") -> dict:
    return {
        "ucp": {
            "version": version,
            "services": {"dev.ucp.shopping": [{"version": version, "transport": "rest", "endpoint": base + "/ucp/v1"}]},
            "capabilities": capability_entries(version),
            "payment_handlers": {},
        },
        "signing_keys": [PUB],
    }


def _off_curve(jwk: dict) -> dict:
    y = bytearray(base64.urlsafe_b64decode(jwk["y"] + "="))
    y[-1] ^= 1
    return {**jwk, "y": base64.urlsafe_b64encode(bytes(y)).rstrip(b"=").decode()}


@pytest.fixture
async def broken():
    """One server, one broken business per path prefix."""
    app = web.Application()
    state = SimpleNamespace(base="")
    cache = {"Cache-Control": "public, max-age=300", "ETag": '"v1"'}

    cases = {
        "good": (_doc, cache),
        "der": (_doc, cache),
        "nocache": (_doc, {}),
        "offcurve": (lambda b: {**_doc(b), "signing_keys": [_off_curve(PUB)]}, cache),
        "shape": (lambda b: _doc(b, "2026-08-25"), cache),  # an 08-25 profile without keys[]
        "noapi": (lambda b: _doc(b + "/nowhere"), cache),  # a REST endpoint with nothing behind it
    }

    async def profile(request):
        case = request.match_info["case"]
        if case == "redirect":
            raise web.HTTPFound(state.base + "/good/.well-known/ucp")
        make, headers = cases[case]
        return web.json_response(make(state.base + "/" + case), headers=headers)

    async def not_found(request):
        return web.json_response({"code": "not_found"}, status=404)

    app.router.add_get("/{case}/.well-known/ucp", profile)

    async def der_checkout(request):
        body = json.dumps({"id": "chk_1", "status": "incomplete"}).encode()
        req = RequestView("POST", str(request.url), CIMultiDict(request.headers), await request.read())
        view = ResponseView(201, CIMultiDict({"Content-Type": "application/json"}), req, body)
        key = agent_key_from_jwk(KEY, "-")
        sign_response_view(view, key, now=dt.datetime.now(dt.UTC))
        label, _, b64 = view.headers["Signature"].partition("=")
        raw = base64.b64decode(b64.strip(":"))
        view.headers["Signature"] = f"{label}=:{base64.b64encode(der_signature(raw, 32)).decode()}:"
        return web.Response(status=201, body=body, headers=view.headers)

    async def get_checkout(request):  # as a shop that wants signatures answers an unsigned Get Checkout
        return web.json_response({"code": "signature_missing"}, status=401)

    app.router.add_post("/{case}/ucp/v1/checkout-sessions", der_checkout)
    app.router.add_get("/{case}/ucp/v1/checkout-sessions/{id}", get_checkout)
    app.router.add_route("*", "/{tail:.*}", not_found)  # anything else: the JSON 404 a gateway answers
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    yield state.base
    await runner.cleanup()


@pytest.mark.parametrize(
    "case, check, extra",
    [
        ("nocache", "cache_control", ()),
        ("offcurve", "key_invalid", ()),
        ("redirect", "redirect", ()),
        ("shape", "version_shape", ()),
        ("der", "response_signature", ("--roundtrip", "pot_ceramic")),
        ("noapi", "endpoint", ()),  # a JSON 404 was once marked ok
    ],
)
async def test_each_defect_is_found_and_named(broken, case, check, extra):
    p = await asyncio.to_thread(doctor, f"{broken}/{case}/.well-known/ucp", "--allow-http", *extra)
    code, by = worst(p)
    assert code == 2 and check in by["error"], p.stdout
    if case == "der":
        msg = next(f["message"] for f in json.loads(p.stdout)["findings"] if f["check"] == check)
        assert "DER" in msg
    p = await asyncio.to_thread(doctor, f"{broken}/good/.well-known/ucp", "--allow-http")
    assert "error" not in worst(p)[1], p.stdout  # the same document, served right, has none


def test_endpoint_probe_and_status_pure():
    assert probe_url("https://s.example/ucp/v1/", "rest") == "https://s.example/ucp/v1/checkout-sessions/doctor-probe"
    assert probe_url("https://s.example/ucp/mcp", "mcp") == "https://s.example/ucp/mcp"
    j = "application/json"
    assert [check_endpoint("s", "rest", "u", st, j).severity for st in (200, 401, 405, 404, 410, 500, 503)] == [
        "ok", "ok", "ok", "error", "error", "error", "error"]  # fmt: skip
    assert check_endpoint("s", "rest", "u", 200, "text/html").severity == "warning"
    assert check_endpoint("s", "rest", "u", 404, "text/html").severity == "error"


def test_key_and_document_checks_pure():
    assert check_key(PUB, "keys")[0].severity == "ok"
    assert check_key(KEY, "keys")[0].check == "key_private"
    assert check_key({**PUB, "alg": "ES384"}, "keys")[0].check == "key_invalid"
    assert check_key({**PUB, "kid": "A" * 43}, "keys")[0].check == "key_thumbprint"
    assert check_key(_off_curve(PUB), "keys")[0].check == "key_invalid"
    leaf = _doc("https://shop.example")
    assert not [f for f in check_document(leaf, kind="business") if f.severity == "error"]
    bare = copy.deepcopy(leaf)
    bare["ucp"]["capabilities"]["dev.ucp.shopping.checkout"][0].pop("spec")
    assert "version_shape" in [f.check for f in check_document(bare, kind="business") if f.severity == "error"]
    nested = copy.deepcopy(leaf)
    nested["ucp"]["supported_versions"] = {"2026-01-23": "https://shop.example/old"}
    found = check_document(nested, kind="business", expect_version="2026-04-08")
    assert "version_shape" in [f.check for f in found if f.severity == "error"]

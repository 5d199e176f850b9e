"""WebMCP over a real socket: session cookie, CSRF, cross-company refusal, manifest per page."""

from __future__ import annotations

import aiohttp

from ucp_gateway.tenancy import create_company
from ucp_gateway.transports.sessions import COOKIE_NAME, create_session, csrf_for
from ucp_gateway.transports.webmcp import page_verbs
from ucp_gateway.verbs import build_registry
from ucp_gateway.verbs.policy import RiskClass

from .conftest import T0


async def _open(gateway, role="owner"):
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.url + "/api/v1/webmcp/session",
                             headers={"Authorization": f"Bearer {gateway.tokens[role]}"}) as resp:  # fmt: skip
            assert resp.status == 200, await resp.text()
            body = await resp.json()
            cookies = resp.headers.getall("Set-Cookie")
    session = next(c for c in cookies if c.startswith(COOKIE_NAME + "="))
    token = session.split(";")[0].split("=", 1)[1]
    return token, body["csrf_token"], session


async def _exec(gateway, tool, body, *, token=None, csrf=None, host=None):
    headers = {}
    if token:
        headers["Cookie"] = f"{COOKIE_NAME}={token}"
    if csrf is not None:
        headers["X-CSRF-Token"] = csrf
    if host:
        headers["Host"] = host
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.url + f"/api/v1/webmcp/execute/{tool}", json=body, headers=headers) as resp:
            return resp.status, await resp.json()


async def test_session_cookie_attributes_and_execute(gateway):
    token, csrf, set_cookie = await _open(gateway)
    attrs = {a.strip().lower() for a in set_cookie.split(";")[1:]}
    assert {"httponly", "secure", "samesite=lax", "path=/api/v1/webmcp"} <= attrs
    assert csrf == csrf_for(token)
    body = {"input": {"customer_id": "cust_1"}, "surface": "dashboard"}
    status, env = await _exec(gateway, "customer__context", body, token=token, csrf=csrf)
    assert status == 200 and env["ok"] and env["verb"] == "customer.context"


async def test_execute_refusals(gateway, database):
    token, csrf, _ = await _open(gateway)
    body = {"input": {"customer_id": "cust_1"}, "surface": "dashboard"}
    status, err = await _exec(gateway, "customer__context", body)  # no cookie
    assert status == 401 and err["code"] == "session_required"
    status, err = await _exec(gateway, "customer__context", body, token=token)  # no CSRF header
    assert status == 403 and err["code"] == "csrf_invalid"
    status, err = await _exec(gateway, "customer__context", body, token=token, csrf=csrf[:-2] + "xx")  # forged
    assert status == 403 and err["code"] == "csrf_invalid"
    status, err = await _exec(gateway, "customer__context", body, token="wms_" + "0" * 32 + "_" + "A" * 43, csrf=csrf)
    assert status == 401 and err["code"] == "session_required"
    # across companies: a valid session of another company, presented on this company's host
    other = await create_company(database.pool, slug="other-shop", display_name="Other", hostnames=["other.test"])
    theirs, _ = await create_session(database.pool, other.id, subject="mallory", role="owner", now=T0, ttl=3600)
    status, err = await _exec(gateway, "customer__context", body, token=theirs, csrf=csrf_for(theirs))
    assert status == 403 and err["code"] == "session_company_mismatch"
    # and this company's session on the other company's host
    status, err = await _exec(gateway, "customer__context", body, token=token, csrf=csrf, host="other.test")
    assert status == 403 and err["code"] == "session_company_mismatch"
    # a body that is not labelled application/json is refused before it is parsed or dispatched
    async with aiohttp.ClientSession() as http:
        hdrs = {"Cookie": f"{COOKIE_NAME}={token}", "X-CSRF-Token": csrf, "Content-Type": "text/plain"}
        url = gateway.url + "/api/v1/webmcp/execute/customer__context"
        async with http.post(url, data=b'{"input": {"customer_id": "cust_1"}}', headers=hdrs) as resp:
            assert resp.status == 415 and (await resp.json())["code"] == "unsupported_media_type"
    # a staff token is not a session; an anonymous caller cannot open one
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.url + "/api/v1/webmcp/session") as resp:
            assert resp.status == 401


async def test_manifest_pages_and_surface_filter(gateway):
    async with aiohttp.ClientSession() as http:
        async with http.get(gateway.url + "/api/v1/webmcp/manifest?surface=portal") as resp:
            portal = await resp.json()
        async with http.get(gateway.url + "/api/v1/webmcp/manifest?surface=dashboard") as resp:
            dash = await resp.json()
        async with http.get(gateway.url + "/api/v1/webmcp/manifest?surface=nope") as resp:
            assert resp.status == 400 and (await resp.json())["code"] == "invalid_request"
        async with http.get(gateway.url + "/api/v1/webmcp/webmcp.js") as resp:
            js = await resp.text()
            assert resp.content_type == "application/javascript" and "navigator.modelContext" in js
            assert "registerTool" in js
    pnames = {t["name"] for t in portal["tools"]}
    dnames = {t["name"] for t in dash["tools"]}
    assert "payments__refund" in dnames and "payments__refund" not in pnames and pnames < dnames
    token, csrf, _ = await _open(gateway)
    status, env = await _exec(gateway, "payments__refund", {"input": {"order_id": "ord_1", "amount": 1,
                              "currency": "USD"}, "surface": "portal"}, token=token, csrf=csrf)  # fmt: skip
    assert status == 200 and env["error"]["reason"] == "surface_not_allowed"


def test_page_rule():
    reg = build_registry()
    assert all(v.policy.risk_class is RiskClass.READ for v in page_verbs(reg, "tenant-site"))
    assert {v.name for v in page_verbs(reg, "public")} == {"capability.manifest"}
    assert all("webmcp" in v.record["surfaces"] for v in page_verbs(reg, "dashboard"))

"""HTTP front door on the real app: manifest caching, dispatch statuses, staff tokens, Idempotency-Key."""

import json

import pytest
from multidict import CIMultiDict

from ucp_gateway.app import create_app
from ucp_gateway.verbs.auth import issue_staff_token
from ucp_gateway.verbs.schemas import envelope_validator, record_validator
from ucp_gateway.verbs.web import VERBS

HOST = {"Host": "flower-shop.test"}
JSON = "application/json"


@pytest.fixture
async def client(aiohttp_client, shop, database, db_settings, clock):
    app = create_app(db_settings, clock=clock, database=database)
    return await aiohttp_client(app)


async def token(database, shop, role):
    return {**HOST, "Authorization": "Bearer " + await issue_staff_token(database.pool, shop.id, role, f"{role}-user")}


async def test_manifest_public_cached_filtered(client):
    r = await client.get("/api/v1/agent/verbs")
    assert r.status == 200 and r.headers["Cache-Control"] == "public, max-age=300"
    records = await r.json()
    names = {x["name"] for x in records}
    assert all(record_validator().is_valid(x) for x in records) and len(records) == len(names) >= 20
    hidden = {
        v.name for v in client.app[VERBS].registry if v.policy.admin_only or v.policy.risk_class.value == "BLOCKED"
    }
    assert names == {v.name for v in client.app[VERBS].registry} - hidden
    tag = r.headers["ETag"]
    again = await client.get("/api/v1/agent/verbs", headers={"If-None-Match": tag})
    assert again.status == 304
    two = CIMultiDict([("If-None-Match", '"other"'), ("If-None-Match", tag)])  # one list (RFC 9110 §5.3)
    assert (await client.get("/api/v1/agent/verbs", headers=two)).status == 304
    # regression: the comparison was exact, so a weak validator or * never revalidated (RFC 9110 §13.1.2)
    for inm in (f"W/{tag}", "*", f'"other", W/{tag}'):
        assert (await client.get("/api/v1/agent/verbs", headers={"If-None-Match": inm})).status == 304, inm
    assert (await client.get("/api/v1/agent/verbs", headers={"If-None-Match": 'W/"other"'})).status == 200
    ucp = await (await client.get("/api/v1/agent/verbs?surface=ucp")).json()
    assert all("ucp" in x["surfaces"] for x in ucp) and "payments.refund" not in {x["name"] for x in ucp}
    previews = await (await client.get("/api/v1/agent/verbs?shape=preview")).json()
    assert {x["shape"] for x in previews} == {"preview"}
    assert (await client.get("/api/v1/agent/verbs?surface=graphql")).status == 400
    one = await client.get("/api/v1/agent/verbs/payments.refund")
    assert (await one.json())["name"] == "payments.refund"
    assert (await client.get("/api/v1/agent/verbs/customer_delete")).status == 404


async def test_manifest_by_subagent_matches_profile_verb_count(client):
    # regression: ?subagent= was ignored, so every sub-agent link returned all verbs
    profile = await (await client.get("/.well-known/ucp", headers=HOST)).json()
    caps = {
        k.rsplit(".", 1)[1]: v[0]["config"]
        for k, v in profile["ucp"]["capabilities"].items()
        if "manifest" in v[0].get("config", {})
    }
    assert {"ap", "sales", "ops"} <= set(caps)
    for name, config in caps.items():
        url = config["manifest"]
        assert url.endswith(f"/api/v1/agent/verbs?surface=ucp&subagent={name}")
        r = await client.get(url[url.index("/api/") :], headers=HOST)
        records = await r.json()
        assert r.status == 200 and len(records) == config["verb_count"], name
        rows = {v.name: v for v in client.app[VERBS].registry}
        assert all(rows[x["name"]].policy.subagent == name and "ucp" in x["surfaces"] for x in records)
    bad = await client.get("/api/v1/agent/verbs?surface=ucp&subagent=bogus")
    assert bad.status == 400 and (await bad.json())["error"]["reason"] == "invalid_arguments"
    assert (await client.get("/api/v1/agent/verbs?subagent=")).status == 400


async def test_new_verb_changes_etag(client):
    tag = (await client.get("/api/v1/agent/verbs")).headers["ETag"]
    from ucp_gateway.verbs import RiskClass, VerbPolicy

    async def h(ctx):
        return {"entity_id": 1, "data": {}}

    client.app[VERBS].registry.register(
        {"name": "late.arrival", "description": "x", "shape": "aggregate", "input_schema": {"type": "object"}},
        VerbPolicy(RiskClass.READ),
        h,
    )
    r = await client.get("/api/v1/agent/verbs", headers={"If-None-Match": tag})
    assert r.status == 200 and r.headers["ETag"] != tag
    assert "late.arrival" in {x["name"] for x in await r.json()}


async def test_dispatch_statuses(client, database, shop):
    body = {"verb": "customer.context", "args": {"customer_id": "cust_1"}}
    assert (await client.post("/api/v1/agent/dispatch", json=body, headers=HOST)).status == 401
    bad = {**HOST, "Authorization": "Bearer ucpgw_st_nope"}
    assert (await client.post("/api/v1/agent/dispatch", json=body, headers=bad)).status == 401
    h = await token(database, shop, "read_only")
    r = await client.post("/api/v1/agent/dispatch", json=body, headers=h)
    env = await r.json()
    assert r.status == 200 and env["ok"] and envelope_validator().is_valid(env)
    for malformed in (
        b"not json",
        b"[]",
        b'{"verb": 3}',
        b'{"verb": "x", "args": []}',
        b'{"verb": "x", "confirm": "yes"}',
        # regression: an unknown field ('arguments' for 'args') was dropped and the verb ran with defaults
        b'{"verb": "ap.suggest_restock", "arguments": {"threshold": 3}}',
    ):
        r = await client.post("/api/v1/agent/dispatch", data=malformed, headers={**h, "Content-Type": JSON})
        assert r.status == 400 and (await r.json())["error"]["reason"] == "invalid_request"
    denied = await client.post(
        "/api/v1/agent/dispatch",
        json={"verb": "crm_contact_update", "confirm": True, "args": {"contact_id": 1, "status": "vip"}},
        headers=h,
    )
    assert denied.status == 200 and (await denied.json())["error"]["reason"] == "role_denied"
    off_host = await client.post("/api/v1/agent/dispatch", json=body, headers={**h, "Host": "unknown.test"})
    assert off_host.status == 404


async def test_dispatch_idempotency_keys_follow_the_one_rule(client, database, shop):
    """The verb dispatch door checks keys by the rule of the UCP bindings (verbs.store.valid_key)."""
    h = await token(database, shop, "read_only")
    body = {"verb": "customer.context", "args": {"customer_id": "cust_1"}}
    for key in ("k" * 129, "tab\tkey", "line\u2028sep"):
        r = await client.post("/api/v1/agent/dispatch", json={**body, "idempotency_key": key}, headers=h)
        err = (await r.json())["error"]
        assert r.status == 400 and err["reason"] == "invalid_request", key
        assert "1-128 printable characters" in err["message"], err
    r = await client.post("/api/v1/agent/dispatch", json={**body, "idempotency_key": "k " * 64}, headers=h)
    assert r.status == 200 and (await r.json())["ok"]


async def test_dispatch_refuses_a_content_coding_it_does_not_decode(client, database, shop):
    """Regression (newcomer): the dispatch door ignored Content-Encoding: a gzip body was refused as
    bad JSON, and a plain body labelled gzip was executed. RFC 9110 §8.4.1: 415."""
    import gzip

    h = await token(database, shop, "read_only")
    raw = json.dumps({"verb": "customer.context", "args": {"customer_id": "cust_1"}}).encode()
    for body, coding in ((gzip.compress(raw), "gzip"), (raw, "gzip"), (raw, "xyz")):
        r = await client.post(
            "/api/v1/agent/dispatch", data=body, headers={**h, "Content-Type": JSON, "Content-Encoding": coding}
        )
        assert r.status == 415, (coding, await r.text())
        assert "is not supported here" in (await r.json())["error"]["message"]
    r = await client.post(
        "/api/v1/agent/dispatch", data=raw, headers={**h, "Content-Type": JSON, "Content-Encoding": "identity"}
    )
    assert r.status == 200 and (await r.json())["ok"]


async def test_token_of_other_company_rejected(client, database, shop):
    from ucp_gateway.tenancy import create_company

    other = await create_company(database.pool, slug="other", display_name="Other", hostnames=["other.test"])
    h = await token(database, shop, "owner")
    r = await client.post(
        "/api/v1/agent/dispatch", json={"verb": "capability.manifest"}, headers={**h, "Host": "other.test"}
    )
    assert r.status == 401
    assert other.id != shop.id


async def test_idempotency_key_header_and_phrase_flow(client, database, shop):
    h = {**(await token(database, shop, "employee")), "Idempotency-Key": "hdr-1"}
    body = {"verb": "inventory_adjust", "args": {"product_id": "orchid_white", "delta": 2}, "confirm": True}
    a = await (await client.post("/api/v1/agent/dispatch", json=body, headers=h)).json()
    b = await (await client.post("/api/v1/agent/dispatch", json=body, headers=h)).json()
    assert a["idempotency_key"] == "hdr-1" and b["replayed"] and b["result"] == a["result"]
    admin = await token(database, shop, "admin")
    args = {"order_id": "ord_4", "amount": 250, "currency": "USD"}
    pre = await (
        await client.post("/api/v1/agent/dispatch", json={"verb": "payments.refund", "args": args}, headers=admin)
    ).json()
    # money movement: the token that asked cannot confirm it; the answer names the approval page
    assert pre["pending"]["confirm"] == "human" and "/admin/approvals/apr_" in pre["pending"]["approval_url"]
    denied = await (
        await client.post(
            "/api/v1/agent/dispatch",
            headers=admin,
            json={
                "verb": "payments.refund",
                "args": args,
                "confirm": True,
                "typed_phrase": pre["pending"]["required_phrase"],
            },
        )
    ).json()
    assert denied["error"]["reason"] == "consent_channel_required"
    assert denied["pending"]["approval_url"] == pre["pending"]["approval_url"]


def test_request_principal_mapping(shop):
    from types import SimpleNamespace

    from ucp_gateway.verbs.web import request_principal

    signed = SimpleNamespace(company_id=shop.id, role="buyer", verified=True, profile_url="https://p.example/agent")
    p = request_principal(signed, shop)
    assert (p.kind, p.role, p.subject) == ("buyer", "buyer", "https://p.example/agent")
    partner = SimpleNamespace(company_id=shop.id, role="employee", verified=True, profile_url=None, kid="k1")
    assert request_principal(partner, shop).kind == "agent"
    assert request_principal(SimpleNamespace(company_id=shop.id, role="owner", verified=False), shop) is None
    assert request_principal(SimpleNamespace(company_id="other", role="owner", verified=True), shop) is None


async def test_nan_body_is_malformed(client, database, shop):
    h = await token(database, shop, "owner")
    nan = b'{"verb": "customer.context", "args": {"x": NaN}}'
    r = await client.post("/api/v1/agent/dispatch", data=nan, headers={**h, "Content-Type": JSON})
    assert r.status == 400


async def test_dispatch_body_must_be_json(client, database, shop):
    h = await token(database, shop, "read_only")
    raw = b'{"verb": "capability.manifest"}'
    r = await client.post("/api/v1/agent/dispatch", data=raw, headers={**h, "Content-Type": "text/plain"})
    env = await r.json()
    assert r.status == 415 and env["error"]["reason"] == "unsupported_media_type" and envelope_validator().is_valid(env)
    r = await client.post(
        "/api/v1/agent/dispatch", data=raw, headers={**h, "Content-Type": "application/json;charset=UTF-8"}
    )
    assert r.status == 200 and (await r.json())["ok"]


async def test_staff_bearer_passes_required_signature_policy(client, database):
    """Regression: unsigned staff calls were refused (401 signature_missing) on `required` companies."""
    from ucp_gateway.tenancy import create_company

    strict = await create_company(
        database.pool, slug="strict", display_name="Strict", hostnames=["strict.test"], signature_policy="required"
    )
    host = {"Host": "strict.test"}
    body = {"verb": "capability.manifest"}
    tok = await issue_staff_token(database.pool, strict.id, "read_only", "clerk")
    ok = await client.post("/api/v1/agent/dispatch", json=body, headers={**host, "Authorization": f"Bearer {tok}"})
    assert ok.status == 200 and (await ok.json())["ok"] is True
    # a bad token is still refused by the front door
    bad = await client.post("/api/v1/agent/dispatch", json=body, headers={**host, "Authorization": "Bearer ucpat_x"})
    assert bad.status == 401
    # and with no credential at all the signature middleware asks for a signature
    none = await client.post("/api/v1/agent/dispatch", json=body, headers=host)
    assert none.status == 401 and (await none.json())["code"] == "signature_missing"
    # ... and says how staff authenticate (newcomer: "request is not signed" never named the token)
    assert "Authorization: Bearer <admin API token>" in (await none.json())["content"]
    # a bearer token does not exempt other company routes from signatures
    other = await client.get("/ucp/v1/orders/x", headers={**host, "Authorization": f"Bearer {tok}"})
    assert other.status == 401 and (await other.json())["code"] == "signature_missing"


async def test_unstorable_args_are_400(client, database, shop):
    """Regression: an unpaired surrogate in args made the audit insert fail with a 500."""
    h = await token(database, shop, "owner")
    raw = b'{"verb": "capability.manifest", "args": {"prefix": "\\ud800"}}'
    r = await client.post("/api/v1/agent/dispatch", data=raw, headers={**h, "Content-Type": JSON})
    assert r.status == 400, await r.text()

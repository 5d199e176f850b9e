"""The partner toolkit as a partner runs it (real processes): ``keys generate-agent`` makes a key
and a profile, ``sign --send`` completes a signed create-checkout against the flower shop on a real
socket and checks its signed answer, ``verify`` accepts what the gateway signed and refuses
tampered messages and the RFC 9421 negative vectors with the spec's codes."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from multidict import CIMultiDict

from ucp_gateway.db import tenant_tx
from ucp_gateway.toolkit.sign import agent_profile, sign_request
from ucp_gateway.transports.agentkey import agent_key_from_jwk, generate_agent_jwk

from ..test_cli import run
from .conftest import Platform, make_app, started

DATA = Path(__file__).parents[1] / "data" / "rfc9421"
ED_KEY = DATA / "keys" / "test-key-ed25519.public.jwk.json"
EC_KEY = DATA / "keys" / "test-key-ecc-p256.public.jwk.json"


async def cli(*args: str):
    return await asyncio.to_thread(run, list(args), {"UCPGW_ENVIRONMENT": "development"})


@pytest.fixture
async def shop(aiohttp_client, database, db_settings, company):
    async with tenant_tx(database.pool, company.id) as conn:  # signed requests only, as in production
        await conn.execute("UPDATE companies SET signature_policy = 'required' WHERE id = $1", company.id)
    return await started(aiohttp_client, make_app(database, db_settings, public_scheme="http"), database, company)


@pytest.fixture(params=[("ES256", "2026-04-08"), ("EdDSA", "2026-08-25")], ids=["es256-0408", "ed25519-0825"])
async def agent(tmp_path, request):
    """A partner's agent: a key made by ``keys generate-agent`` and its profile on 127.0.0.1, once
    as an ES256 platform of 2026-04-08 and once as an Ed25519 platform of the 2026-08-25 root."""
    alg, version = request.param
    platform = await Platform().start()
    url = f"{platform.base}/profile/a.json"
    p = await cli("keys", "generate-agent", "--profile-url", url, "--out", str(tmp_path), "--json",
                  "--alg", alg, "--version", version)  # fmt: skip
    assert p.returncode == 0, p.stderr
    made = json.loads(p.stdout)
    platform.raw_document = json.loads(Path(made["profile_file"]).read_text())
    platform.key_file, platform.profile_url, platform.version = made["key_file"], url, version
    yield platform
    await platform.runner.cleanup()


def test_generate_agent_files(tmp_path):
    p = run(["keys", "generate-agent", "--profile-url", "https://agent.example/p.json", "--out", str(tmp_path),
             "--alg", "EdDSA", "--version", "2026-04-08"])  # fmt: skip
    assert p.returncode == 1 and "cannot publish a OKP Ed25519 key" in p.stderr  # 04-08 lists EC keys only
    p = run(["keys", "generate-agent", "--profile-url", "https://agent.example/p.json", "--out", str(tmp_path),
             "--alg", "EdDSA", "--json"])  # fmt: skip
    assert p.returncode == 0, p.stderr
    made = json.loads(p.stdout)
    key_file = Path(made["key_file"])
    assert key_file.stat().st_mode & 0o077 == 0  # nobody else may read the private key
    jwk = json.loads(key_file.read_text())
    profile = made["profile"]
    assert profile["keys"][0]["kid"] == jwk["kid"] == made["kid"] and "d" not in profile["keys"][0]
    assert profile["ucp"]["version"] == "2026-08-25" and "signing_keys" not in profile  # no ES256 key to mirror
    p = run(["keys", "generate-agent", "--profile-url", "https://agent.example/p.json", "--out", str(tmp_path)])
    assert p.returncode == 1 and "exists" in p.stderr  # never overwrites a key without --force


def test_agent_profile_lists_per_version():
    ec = agent_key_from_jwk(generate_agent_jwk("ES256"), "https://a.example/p").public_jwk()
    root = agent_profile(ec, version="2026-08-25", webhook_url="https://a.example/hook")
    assert root["keys"] == [ec] == root["signing_keys"]  # the ES256 mirror for 04-08 verifiers
    assert root["ucp"]["capabilities"]["dev.ucp.shopping.order"][0]["config"] == {
        "webhook_url": "https://a.example/hook"
    }
    leaf = agent_profile(ec, version="2026-04-08")
    assert leaf["signing_keys"] == [ec] and all("spec" in e[0] for e in leaf["ucp"]["capabilities"].values())


async def test_sign_send_creates_a_checkout_and_verifies_the_answer(shop, agent, tmp_path):
    body = tmp_path / "create.json"
    body.write_text(json.dumps({"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}))
    target = str(shop.make_url("/ucp/v1/checkout-sessions"))
    p = await cli("sign", target, "-d", f"@{body}", "--key", agent.key_file, "--profile", agent.profile_url,
                  "--send", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    out = json.loads(p.stdout)
    assert out["status"] == 201 and out["body"]["status"] in ("incomplete", "ready_for_complete"), out
    assert out["body"]["ucp"]["version"] == agent.version  # answered in the platform's own version
    assert out["response_signature"]["verdict"]["ok"], out["response_signature"]
    assert out["response_signature"]["verdict"]["kid"] in out["headers"]["Signature-Input"]
    assert p.stdout.endswith("}\n")  # --json ends its last line too

    # without --send: the headers a partner adds to its own request
    p = await cli("sign", target, "-d", f"@{body}", "--key", agent.key_file, "--profile", agent.profile_url)
    assert p.returncode == 0, p.stderr
    names = {line.split(":", 1)[0].lower() for line in p.stdout.splitlines()}
    assert {"ucp-agent", "idempotency-key", "content-digest", "signature-input", "signature"} <= names

    # unsigned, the shop refuses (and sign reports the failure with exit 1)
    p = await cli("sign", target, "-d", f"@{body}", "--key", agent.key_file, "--profile", agent.profile_url + "x",
                  "--send")  # fmt: skip
    assert p.returncode == 1 and "HTTP 4" in p.stdout
    assert p.stdout.endswith("}\n") and p.stderr.endswith("\n")  # the answer's body, then a newline
    # the text form of a signed send: status line, headers, body, each output ending its last line
    p = await cli("sign", target, "-d", f"@{body}", "--key", agent.key_file, "--profile", agent.profile_url, "--send")
    assert p.returncode == 0 and p.stdout.startswith("HTTP 201\n"), p.stderr + p.stdout
    assert p.stdout.endswith("}\n") and p.stderr.endswith("\n") and "verdict: valid" in p.stderr, (p.stdout, p.stderr)

    # a request without a body (a signed GET of the checkout): no Content-Digest to cover, still verified
    checkout_id = json.loads(p.stdout[p.stdout.index("\n{") :])["id"]
    got = str(shop.make_url(f"/ucp/v1/checkout-sessions/{checkout_id}"))
    p = await cli("sign", got, "--key", agent.key_file, "--profile", agent.profile_url, "--send", "--json")
    assert p.returncode == 0, p.stderr + p.stdout
    out = json.loads(p.stdout)
    assert out["status"] == 200 and out["body"]["id"] == checkout_id, out  # the shop requires signatures
    assert out["response_signature"]["verdict"]["ok"], out


async def test_verify_accepts_what_the_gateway_signed_and_refuses_tampering(shop, agent, tmp_path):
    key = agent_key_from_jwk(json.loads(Path(agent.key_file).read_text()), agent.profile_url)
    url = str(shop.make_url("/ucp/v1/checkout-sessions"))
    raw = json.dumps({"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}).encode()
    ctype = CIMultiDict({"Content-Type": "application/json"})
    headers = sign_request(key, "POST", url, ctype, raw, now=datetime.now(UTC))
    async with aiohttp.ClientSession(auto_decompress=False) as s, s.post(url, data=raw, headers=headers) as r:
        status, rh, rbody = r.status, r.headers, await r.read()
    assert status == 201
    host = shop.make_url("/").host + ":" + str(shop.make_url("/").port)
    req = "POST /ucp/v1/checkout-sessions HTTP/1.1\r\nHost: " + host + "\r\n"
    req += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    (tmp_path / "req.http").write_bytes(req.encode() + raw)
    resp = f"HTTP/1.1 {status} OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in rh.items()) + "\r\n"
    (tmp_path / "resp.http").write_bytes(resp.encode() + rbody)
    profile = str(shop.make_url("/.well-known/ucp"))

    p = await cli("verify", str(tmp_path / "resp.http"), "--request", str(tmp_path / "req.http"), "--profile", profile,
                  "--scheme", "http")  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert "verdict: valid" in p.stdout and '"@status": 201' in p.stdout  # the signature base is shown

    (tmp_path / "bad.http").write_bytes(resp.encode() + rbody.replace(b"pot_ceramic", b"pot_ceramiX"))
    p = await cli("verify", str(tmp_path / "bad.http"), "--request", str(tmp_path / "req.http"), "--profile", profile,
                  "--scheme", "http", "--json")  # fmt: skip
    assert p.returncode == 1 and json.loads(p.stdout)["verdict"]["code"] == "digest_mismatch"

    # the request itself, as the gateway's debug view sees it, against the agent's published key
    p = await cli("verify", str(tmp_path / "req.http"), "--profile", agent.profile_url, "--scheme", "http",
                  "--allow-http-profile", "--json")  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    assert rep["verdict"]["ok"] and rep["signatures"][0]["missing_components"] == []


@pytest.mark.parametrize("kind", ["still_valid", "invalid"])
def test_verify_rfc9421_transform_vectors(tmp_path, kind):
    variants = json.loads((DATA / "messages" / "b4-transform-variants.json").read_text())[kind]
    for i, text in enumerate(variants):
        f = tmp_path / f"{kind}{i}.http"
        f.write_text(text)
        p = run(["verify", str(f), "--jwk", str(ED_KEY), "--rfc9421", "--json"])
        rep = json.loads(p.stdout or "{}")
        if kind == "still_valid":
            assert p.returncode == 0, (i, p.stdout, p.stderr)
        else:
            assert p.returncode == 1 and rep["verdict"]["code"] == "signature_invalid", (i, p.stdout, p.stderr)


def test_verify_rfc9421_response_vector_and_unsigned(tmp_path):
    p = run(["verify", str(DATA / "messages" / "test-response.corrected.http"), "--jwk", str(EC_KEY), "--rfc9421"])
    assert p.returncode == 1 and "signature_missing" in p.stdout  # the B.2 response as printed carries none
    case = next(c for c in json.loads((DATA / "vectors.json").read_text())["cases"] if c["id"] == "B.2.4")
    msg = (
        (DATA / "messages" / "test-response.corrected.http")
        .read_text()
        .replace(
            "\n\n", f"\nSignature-Input: {case['signature_input_field']}\nSignature: {case['signature_field']}\n\n", 1
        )
    )
    (tmp_path / "b24.http").write_text(msg)
    p = run(["verify", str(tmp_path / "b24.http"), "--jwk", str(EC_KEY), "--rfc9421"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert '"@status": 200' in p.stdout
    p = run(["verify", str(tmp_path / "b24.http"), "--jwk", str(ED_KEY), "--rfc9421", "--json"])
    assert p.returncode == 1 and json.loads(p.stdout)["verdict"]["code"] == "key_not_found"
    (tmp_path / "b24x.http").write_text(msg.replace("Content-Type: application/json", "Content-Type: text/json"))
    p = run(["verify", str(tmp_path / "b24x.http"), "--jwk", str(EC_KEY), "--rfc9421", "--json"])
    assert p.returncode == 1 and json.loads(p.stdout)["verdict"]["code"] == "signature_invalid"

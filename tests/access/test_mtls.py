"""mTLS with a PKI made in the test: a real ``ucp-gateway serve --tls-cert --tls-key --client-ca
--client-crl`` process over real TLS sockets (a registered client certificate is identified, no
certificate leaves the other proofs to decide, a revoked or other-CA certificate ends the
handshake, an unregistered or revoked registration is a 401), and a TLS-terminating proxy's
forwarded ``Client-Cert`` header honoured only from a trusted address."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import socket
import ssl
import subprocess
import sys

import aiohttp
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization

from tests.access.pki import CA
from tests.commerce.conftest import Platform
from ucp_gateway.access.credentials import add_credential, revoke_credential
from ucp_gateway.access.mtls import CLIENT_TRUST, ClientTrust
from ucp_gateway.appkeys import SETTINGS
from ucp_gateway.demo.seed import seed_demo
from ucp_gateway.discovery.partners import add_partner

HTTP = frozenset({"127.0.0.1"})
CLI = [sys.executable, "-m", "ucp_gateway.cli"]


@pytest.fixture
def pki(tmp_path):
    ca, other = CA(tmp_path, "Client CA"), CA(tmp_path, "Other CA")
    certs = {
        "server": ca.issue("127.0.0.1", server=True),
        "good": ca.issue("platform-good"),
        "unregistered": ca.issue("platform-unregistered"),
        "revoked": ca.issue("platform-revoked"),
        "stranger": other.issue("platform-good"),  # the same subject, another CA
    }
    crl = ca.crl([certs["revoked"].cert])
    return ca, certs, crl


def _client_ctx(ca_path, issued=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_path))
    if issued is not None:
        ctx.load_cert_chain(str(issued.cert_path), str(issued.key_path))
    return ctx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait_listening(proc: subprocess.Popen, log) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}: {log.read_text()[-2000:]}")
        if '"listening"' in log.read_text():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("serve did not listen")


async def _order(port: int, profile: str, ctx: ssl.SSLContext) -> tuple[int, str | None, dict]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"https://127.0.0.1:{port}/ucp/v1/orders/ord_missing", ssl=ctx,
                            headers={"UCP-Agent": f'profile="{profile}"'}) as r:  # fmt: skip
            return r.status, r.headers.get("UCP-Access-Level"), {**await r.json(), **dict(r.headers)}


async def test_serve_terminates_tls_and_a_registered_client_certificate_names_the_platform(db_settings, database, pki):
    ca, certs, crl = pki
    platform = await Platform().start()
    profile = platform.base + "/profile/a.json"
    company = (await seed_demo(database, db_settings)).company
    await add_partner(database.pool, company.id, profile_url=profile, role="buyer", http_hosts=HTTP)
    now = dt.datetime.now(dt.UTC)
    good, _ = await add_credential(database.pool, company.id, kind="mtls-cert", profile_url=profile, now=now,
                                   identity="sha256:" + certs["good"].cert.fingerprint(_sha256()).hex())  # fmt: skip
    await add_credential(database.pool, company.id, kind="mtls-cert", profile_url=profile, now=now,
                         identity="subject:" + certs["revoked"].cert.subject.rfc4514_string())  # fmt: skip
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCPGW_")}
    env.update({"UCPGW_DATABASE_URL": db_settings.database_url, "UCPGW_ENVIRONMENT": "development",
                "UCPGW_DEV_PROFILE_HOSTS": '["127.0.0.1"]', "UCPGW_KEYS_DIR": str(db_settings.keys_dir),
                "UCPGW_WEBHOOK_WORKER": "false"})  # fmt: skip
    server = certs["server"]
    log = db_settings.data_dir.parent / "serve.log"
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", str(port), "--data-dir", str(db_settings.data_dir),
         "--tls-cert", str(server.cert_path), "--tls-key", str(server.key_path),
         "--client-ca", str(ca.path), "--client-crl", str(crl)],
        stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env,
    )  # fmt: skip
    try:
        await _wait_listening(proc, log)
        status, level, body = await _order(port, profile, _client_ctx(ca.path, certs["good"]))
        assert status == 200 and level == "identified" and body["messages"][0]["code"] == "not_found", body
        # no certificate: optional, so the request goes on to the other proofs (none: refused)
        status, level, body = await _order(port, profile, _client_ctx(ca.path))
        assert status == 401 and body["code"] == "signature_missing" and body["WWW-Authenticate"], body
        # a certificate of the CA that no partner registered: present but wrong, never anonymous
        status, _, body = await _order(port, profile, _client_ctx(ca.path, certs["unregistered"]))
        assert status == 401 and "not registered" in body["content"], body
        # revoked by the CRL (though registered by subject) and another CA's: the handshake fails
        for name in ("revoked", "stranger"):
            with pytest.raises(aiohttp.ClientError):
                await _order(port, profile, _client_ctx(ca.path, certs[name]))
        # the registration revoked: refused on the next request
        await revoke_credential(database.pool, company.id, good.id, now=dt.datetime.now(dt.UTC))
        status, _, body = await _order(port, profile, _client_ctx(ca.path, certs["good"]))
        assert status == 401, body
    except Exception:
        print(log.read_text()[-3000:])
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        await platform.runner.cleanup()


def _sha256():
    from cryptography.hazmat.primitives import hashes

    return hashes.SHA256()


def _rfc9440(cert) -> str:
    return ":" + base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode() + ":"


async def test_forwarded_client_certificate_only_from_trusted_proxies(shop, pki):
    ca, certs, crl = pki
    await add_partner(shop.pool, shop.company.id, profile_url=shop.profile, role="buyer", http_hosts=HTTP)
    for cn in ("platform-good", "platform-revoked"):  # by subject: the CA check and the CRL decide
        await add_credential(shop.pool, shop.company.id, kind="mtls-cert", profile_url=shop.profile,
                             now=dt.datetime.now(dt.UTC), identity=f"subject:CN={cn},O=Test Platform")  # fmt: skip
    settings = shop.app[SETTINGS]
    settings.client_ca, settings.client_crl = ca.path, crl
    trust, fresh = shop.app[CLIENT_TRUST], ClientTrust(settings)
    trust.cas, trust.crl = fresh.cas, fresh.crl
    url = shop.base + "/ucp/v1/orders/ord_missing"
    agent = {"UCP-Agent": f'profile="{shop.profile}"'}

    async def get(header: str) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=30) as http:
            return await http.get(url, headers={**agent, "Client-Cert": header})

    good = _rfc9440(certs["good"].cert)
    r = await get(good)  # trusted_proxies is empty: the header is refused, never read
    assert r.status_code == 401 and "trusted proxies" in r.json()["content"], r.text
    settings.trusted_proxies = ["10.0.0.0/8"]
    assert (await get(good)).status_code == 401
    settings.trusted_proxies = ["127.0.0.0/8"]
    r = await get(good)
    assert r.status_code == 200 and r.headers["UCP-Access-Level"] == "identified", r.text
    # nginx's $ssl_client_escaped_cert: a URL-encoded PEM
    pem = certs["good"].cert.public_bytes(serialization.Encoding.PEM).decode()
    from urllib.parse import quote

    assert (await get(quote(pem, safe=""))).headers["UCP-Access-Level"] == "identified"
    # the same subject from another CA, a revoked one, garbage: refused with the challenge
    for header in (_rfc9440(certs["stranger"].cert), _rfc9440(certs["revoked"].cert), ":bm90IGEgY2VydA==:"):
        r = await get(header)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer"), r.text


async def _cli(db_settings, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCPGW_")}
    env.update({"UCPGW_DATABASE_URL": db_settings.database_url, "UCPGW_ENVIRONMENT": "development"})
    proc = await asyncio.create_subprocess_exec(*CLI, *args, "--data-dir", str(db_settings.data_dir), env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_cli_registers_lists_and_revokes_certificates_and_directories(db_settings, database, pki):
    _, certs, _ = pki
    company = (await seed_demo(database, db_settings)).company
    profile = "https://platform.example/profile.json"
    await add_partner(database.pool, company.id, profile_url=profile, role="buyer")
    base = ["partners", "credentials"]
    code, out, err = await _cli(db_settings, *base, "add", "--company", company.slug, "--kind", "mtls-cert",
                                "--profile", profile, "--cert", str(certs["good"].cert_path), "--json")  # fmt: skip
    assert code == 0, err
    cert = json.loads(out)
    fingerprint = certs["good"].cert.fingerprint(_sha256()).hex()
    assert cert["identity"] == "sha256:" + fingerprint and cert["id"].startswith("mc_") and "secret" not in cert
    code, out, err = await _cli(db_settings, *base, "add", "--company", company.slug, "--kind", "web-bot-auth",
                                "--profile", profile, "--directory", "HTTPS://Agent.Example:443", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["identity"] == "https://agent.example", err
    # the same live identity twice is refused; a directory is needed
    code, _, err = await _cli(db_settings, *base, "add", "--company", company.slug, "--kind", "mtls-cert",
                              "--profile", profile, "--fingerprint", "SHA256:" + fingerprint.upper())  # fmt: skip
    assert code != 0 and "already registered" in err, err
    code, _, err = await _cli(db_settings, *base, "add", "--company", company.slug, "--kind", "web-bot-auth",
                              "--profile", profile)  # fmt: skip
    assert code != 0 and "--directory" in err, err
    code, out, _ = await _cli(db_settings, *base, "revoke", "--company", company.slug, "--id", cert["id"], "--json")
    assert code == 0 and json.loads(out)["revoked_at"]
    code, out, _ = await _cli(db_settings, *base, "list", "--company", company.slug, "--kind", "mtls-cert", "--json")
    assert [c["id"] for c in json.loads(out)["credentials"]] == [cert["id"]]


def test_unusable_tls_files_are_a_config_error_before_serving(tmp_path, pki):
    from ucp_gateway.access.mtls import server_ssl_context
    from ucp_gateway.config import Settings
    from ucp_gateway.errors import ConfigError

    ca, certs, _ = pki
    server = certs["server"]
    bad = tmp_path / "not-a-cert.pem"
    bad.write_text("nothing here")
    pair = {"tls_cert": server.cert_path, "tls_key": server.key_path}
    for kw in ({"tls_cert": bad}, {**pair, "client_ca": bad}, {"client_ca": ca.path}, {**pair, "client_crl": bad}):
        with pytest.raises(ConfigError):
            server_ssl_context(Settings(**kw))
    with pytest.raises(ConfigError):
        ClientTrust(Settings(client_ca=bad))
    ctx = server_ssl_context(Settings(**pair, client_ca=ca.path))
    assert ctx.verify_mode == ssl.CERT_OPTIONAL and ctx.minimum_version == ssl.TLSVersion.TLSv1_2

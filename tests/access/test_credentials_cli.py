"""``ucp-gateway partners credentials add|list|revoke`` as an operator runs it: the venv's
``ucp-gateway`` in a real subprocess on the real database; each credential it prints is then used
against the running gateway (an API key, a client secret, a private_key_jwt client) and refused
once ``revoke`` ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx2
from joserfc import jwk

from tests.access.test_client_jwt import assertion

GATEWAY = str(Path(sys.executable).with_name("ucp-gateway"))  # the console script of this venv
TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def cli(db_settings, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
    env |= {"DATABASE_URL": db_settings.database_url, "UCPGW_ENVIRONMENT": "development",
            "UCPGW_DEV_PROFILE_HOSTS": '["127.0.0.1"]'}  # fmt: skip
    return subprocess.run([GATEWAY, *argv], env=env, input=stdin, capture_output=True, text=True, timeout=120)


def ok(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


async def test_add_list_revoke_in_a_subprocess_and_the_gateway_honours_them(shop, db_settings, tmp_path):
    slug, profile = shop.company.slug, shop.profile
    ok(cli(db_settings, "partners", "add", "--company", slug, "--profile", profile, "--role", "buyer", "--json"))
    base = ["partners", "credentials"]
    key = ok(cli(db_settings, *base, "add", "--company", slug, "--kind", "api-key", "--profile", profile,
                 "--label", "ops", "--json"))  # fmt: skip
    client = ok(cli(db_settings, *base, "add", "--company", slug, "--kind", "oauth-client", "--profile", profile,
                    "--json"))  # fmt: skip
    private = jwk.ECKey.generate_key("P-256")
    jwk_file = tmp_path / "client.jwk"
    jwk_file.write_text(json.dumps({**private.as_dict(private=False), "kid": "ops-1"}))
    jwt_client = ok(cli(db_settings, *base, "add", "--company", slug, "--kind", "oauth-client", "--profile", profile,
                        "--jwk", str(jwk_file), "--json"))  # fmt: skip
    assert key["secret"].startswith("ucpak_") and client["secret"].startswith("ucpcs_")
    assert jwt_client["secret"] is None and jwt_client["auth_methods"] == ["private_key_jwt"]
    # the text form says the secret once; list never shows one
    text = cli(db_settings, *base, "add", "--company", slug, "--kind", "api-key", "--profile", profile)
    assert text.returncode == 0 and "ucpak_" in text.stdout and "shown once" in text.stdout
    listing = cli(db_settings, *base, "list", "--company", slug, "--json")
    ids = {c["id"]: c for c in ok(listing)["credentials"]}
    assert {key["id"], client["id"], jwt_client["id"]} <= set(ids) and len(ids) == 4
    for secret in (key["secret"], client["secret"]):
        assert secret not in listing.stdout
    assert ids[jwt_client["id"]]["jwks"]["keys"][0]["kid"] == "ops-1"
    only = ok(cli(db_settings, *base, "list", "--company", slug, "--kind", "oauth-client", "--json"))
    assert {c["kind"] for c in only["credentials"]} == {"oauth-client"}

    hdrs = {"UCP-Agent": f'profile="{profile}"'}
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    token_url = shop.base + "/oauth2/token"

    async with httpx2.AsyncClient(timeout=30) as http:

        async def checkout(extra: dict) -> int:
            r = await http.post(shop.base + "/ucp/v1/checkout-sessions", json=create, headers={**hdrs, **extra})
            return r.status_code

        async def tokens() -> tuple[httpx2.Response, httpx2.Response]:
            by_secret = await http.post(
                token_url,
                data={"grant_type": "client_credentials", "client_id": client["id"], "client_secret": client["secret"]},
            )
            signed = assertion(private, jwt_client["id"], token_url, kid="ops-1")
            by_jwt = await http.post(token_url, data={"grant_type": "client_credentials", "client_assertion_type": TYPE,
                                                      "client_assertion": signed})  # fmt: skip
            return by_secret, by_jwt

        assert await checkout({"X-API-Key": key["secret"]}) == 201
        by_secret, by_jwt = await tokens()
        assert by_secret.status_code == 200 and by_jwt.status_code == 200, (by_secret.text, by_jwt.text)
        bearer = [r.json()["access_token"] for r in (by_secret, by_jwt)]
        for tok in bearer:
            assert await checkout({"Authorization": f"Bearer {tok}"}) == 201
        # revoke each in the subprocess: refused on the next request, their tokens with them
        for cred in (key, client, jwt_client):
            done = ok(cli(db_settings, *base, "revoke", "--company", slug, "--id", cred["id"], "--json"))
            assert done["revoked_at"], done
        assert await checkout({"X-API-Key": key["secret"]}) == 401
        for tok in bearer:
            assert await checkout({"Authorization": f"Bearer {tok}"}) == 401
        by_secret, by_jwt = await tokens()
        assert by_secret.status_code == 401 and by_jwt.status_code == 401
        assert by_jwt.json()["error"] == "invalid_client"
    listed = {c["id"]: c for c in ok(cli(db_settings, *base, "list", "--company", slug, "--json"))["credentials"]}
    assert all(listed[c["id"]]["revoked_at"] for c in (key, client, jwt_client))


async def test_bad_input_is_a_one_line_error(shop, db_settings, tmp_path):
    slug = shop.company.slug
    base = ["partners", "credentials"]
    ok(cli(db_settings, "partners", "add", "--company", slug, "--profile", shop.profile, "--role", "buyer", "--json"))
    private = tmp_path / "private.jwk"
    private.write_text(json.dumps(jwk.ECKey.generate_key("P-256").as_dict(private=True)))
    garbage = tmp_path / "garbage.jwk"
    garbage.write_text("{not json")
    cases = [
        (["add", "--kind", "oauth-client", "--profile", shop.profile, "--jwk", str(private)], "private"),
        (["add", "--kind", "oauth-client", "--profile", shop.profile, "--jwk", str(garbage)], "not a readable JSON"),
        (["add", "--kind", "oauth-client", "--profile", shop.profile, "--jwk", str(tmp_path / "missing")], "--jwk"),
        (["add", "--kind", "api-key", "--profile", "https://nobody.example/p.json"], "no partner"),
        (["revoke", "--id", "ak_0000000000000000"], "no such credential"),
    ]
    for argv, says in cases:
        p = cli(db_settings, *base, argv[0], "--company", slug, *argv[1:])
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    # a public JWK on stdin
    public = json.dumps(jwk.OKPKey.generate_key("Ed25519").as_dict(private=False))
    added = ok(cli(db_settings, *base, "add", "--company", slug, "--kind", "oauth-client", "--profile", shop.profile,
                   "--jwk", "-", "--json", stdin=public))  # fmt: skip
    assert added["auth_methods"] == ["private_key_jwt"] and added["jwks"]["keys"][0]["crv"] == "Ed25519"

"""CLI commands (through the real parser) and the nonce secret."""

import json
import os
import stat

import pytest

from ucp_gateway.cli import build_parser
from ucp_gateway.config import Settings
from ucp_gateway.verbs.errors import NonceSecretError
from ucp_gateway.verbs.secret import load_nonce_secrets


async def cli(settings, capsys, *argv):
    args = build_parser().parse_args(list(argv))
    code = await args.func(args, settings)
    return code, capsys.readouterr().out


async def test_verbs_list(capsys, db_settings):
    code, out = await cli(db_settings, capsys, "verbs", "list", "--json", "--shape", "receipt")
    names = {r["name"] for r in json.loads(out)}
    assert code == 0 and names == {
        "crm_contact_update",
        "payments.refund",
        "gdpr_delete_contact",
        "inventory_adjust",
        "discount_create",
    }


async def test_agent_dispatch_phrase_flow(shop, db_settings, capsys):
    base = [
        "agent",
        "dispatch",
        "gdpr_delete_contact",
        "--company",
        "flower-shop",
        "--as",
        "owner",
        "--args",
        '{"contact_id": 3}',
        "--json",
    ]
    code, out = await cli(db_settings, capsys, *base)
    pre = json.loads(out)
    assert code == 1 and pre["pending"]["required_phrase"] == "DELETE CONTACT 3 PERMANENTLY"
    # an irreversible write is confirmed by a person on the approval page, never from the CLI
    assert pre["pending"]["confirm"] == "human" and "nonce" not in pre["pending"]
    assert pre["pending"]["approval_url"].endswith("/admin/approvals/" + pre["pending"]["approval_id"])
    code, out = await cli(db_settings, capsys, *base, "--confirm", "--phrase", "DELETE CONTACT 3 PERMANENTLY")
    denied = json.loads(out)
    assert code == 1 and denied["error"]["reason"] == "consent_channel_required", denied
    assert denied["pending"]["approval_id"] == pre["pending"]["approval_id"]  # the same open approval
    code, out = await cli(
        db_settings,
        capsys,
        "agent",
        "dispatch",
        "customer_delete",
        "--company",
        "flower-shop",
        "--as",
        "owner",
        "--confirm",
    )
    assert code == 1 and out.startswith("blocked_verb")
    code, out = await cli(db_settings, capsys, "audit", "verify", "--company", "flower-shop")
    assert code == 0 and "intact: 3 rows" in out


def test_dev_secret_file_is_private(tmp_path):
    s = Settings(data_dir=tmp_path, environment="development")
    kid, keys = load_nonce_secrets(s)
    path = tmp_path / "verbs-nonce.secret"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and len(keys[kid]) >= 32
    assert load_nonce_secrets(s) == (kid, keys)  # stable across restarts


def test_secret_required_in_production(tmp_path):
    with pytest.raises(NonceSecretError):
        load_nonce_secrets(Settings(data_dir=tmp_path, environment="production"))
    with pytest.raises(NonceSecretError):
        load_nonce_secrets(Settings(data_dir=tmp_path, verbs_nonce_secret="short"))
    kid, keys = load_nonce_secrets(
        Settings(data_dir=tmp_path, verbs_nonce_secret="x" * 40, verbs_nonce_secret_previous="y" * 40)
    )
    assert len(keys) == 2 and keys[kid] == b"x" * 40
    assert not (tmp_path / "verbs-nonce.secret").exists()

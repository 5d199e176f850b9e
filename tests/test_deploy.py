"""The deploy artifacts against the settings the code reads (no Docker or cluster runs here): every
manifest parses, every UCPGW_ variable names a Settings field and parses as one, the production
requirements are present, commands are CLI commands, and ports and probes match the settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ucp_gateway.cli import build_parser
from ucp_gateway.config import Settings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
#: What production refuses to start without (or fails closed on): owner DSN, application role,
#: consent-nonce secret, KEK ring (UCPGW_KEK_RING or UCPGW_KEK_FILE).
REQUIRED = {"DATABASE_URL", "UCPGW_APP_DB_PASSWORD", "UCPGW_VERBS_NONCE_SECRET"}


def _field(name: str) -> bool:
    if name == "DATABASE_URL":
        return True
    return name.startswith("UCPGW_") and name[6:].lower() in Settings.model_fields


def _settings(env: dict[str, str]) -> Settings:
    """The Settings the gateway builds from ``env`` (only the UCPGW_ / DATABASE_URL names)."""
    kw = {("database_url" if k == "DATABASE_URL" else k[6:].lower()): v for k, v in env.items() if _field(k)}
    return Settings.model_validate(kw)


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _env_file() -> dict[str, str]:
    lines = (DEPLOY / "gateway.env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_every_manifest_parses_and_names_its_kind():
    assert {p.name for p in MANIFESTS} >= {"deployment.yaml", "migrate-job.yaml", "secret.yaml", "pdb.yaml",
                                            "networkpolicy.yaml", "service.yaml"}  # fmt: skip
    kinds = {d["kind"] for p in MANIFESTS for d in _docs(p)}
    assert kinds == {"Deployment", "Job", "Secret", "PodDisruptionBudget", "NetworkPolicy", "Service"}
    for p in MANIFESTS:
        for d in _docs(p):
            assert d["apiVersion"] and d["metadata"]["name"], p


def _by_kind(kind: str) -> dict:
    (doc,) = [d for p in MANIFESTS for d in _docs(p) if d["kind"] == kind]
    return doc


def _container_env(c: dict, secret: dict) -> dict[str, str]:
    env = {}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"], e
            env[e["name"]] = secret["stringData"][ref["key"]]
    return env


def test_the_deployment_runs_serve_with_every_required_setting_and_matching_ports():
    dep, secret, svc = _by_kind("Deployment"), _by_kind("Secret"), _by_kind("Service")
    assert dep["spec"]["replicas"] >= 2
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert build_parser().parse_args(c["command"][1:]).command == "serve" and c["command"][0] == "ucp-gateway"
    env = _container_env(c, secret)
    assert all(_field(k) for k in env), [k for k in env if not _field(k)]
    assert REQUIRED <= env.keys() and ("UCPGW_KEK_RING" in env or "UCPGW_KEK_FILE" in env)
    s = _settings({**env, "UCPGW_VERBS_NONCE_SECRET": "x" * 32})
    assert s.environment == "production" and s.metrics_port is not None
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": s.port, "metrics": s.metrics_port}
    assert s.host == s.metrics_host == "0.0.0.0"
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    # the KEK ring is the mounted Secret key at UCPGW_KEK_FILE
    (mount,) = c["volumeMounts"]
    (vol,) = dep["spec"]["template"]["spec"]["volumes"]
    assert mount["name"] == vol["name"] and vol["secret"]["secretName"] == secret["metadata"]["name"]
    (item,) = vol["secret"]["items"]
    assert env["UCPGW_KEK_FILE"] == f"{mount['mountPath']}/{item['path']}" and item["key"] == "kek-ring"
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > s.shutdown_timeout
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == set(ports)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"] == labels == _by_kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
    pol = _by_kind("NetworkPolicy")
    assert pol["spec"]["podSelector"]["matchLabels"] == labels
    assert sorted(p["port"] for rule in pol["spec"]["ingress"] for p in rule["ports"]) == sorted(ports.values())


def test_the_migration_job_runs_migrate_with_the_owner_dsn():
    job, secret = _by_kind("Job"), _by_kind("Secret")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert build_parser().parse_args(c["command"][1:]).command == "migrate"
    env = _container_env(c, secret)
    assert {"DATABASE_URL", "UCPGW_APP_DB_PASSWORD"} <= env.keys() and all(_field(k) for k in env)
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")


def test_compose_starts_the_database_first_migrates_and_runs_two_replicas_behind_one_port():
    (compose,) = _docs(DEPLOY / "compose.yaml")
    svc = compose["services"]
    db = svc["db"]
    assert "pg_isready" in " ".join(db["healthcheck"]["test"]) and db["restart"] == "unless-stopped"
    assert svc["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"
    assert svc["migrate"]["depends_on"]["secrets"]["condition"] == "service_completed_successfully"
    assert build_parser().parse_args(svc["migrate"]["command"]).command == "migrate"
    gw = svc["gateway"]
    assert gw["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert gw["deploy"]["replicas"] == 2 and gw["restart"] == "unless-stopped" and "ports" not in gw
    assert gw["entrypoint"][-1].endswith("exec ucp-gateway serve")
    assert "UCPGW_VERBS_NONCE_SECRET=" in gw["entrypoint"][-1] and "/run/ucpgw/nonce" in gw["entrypoint"][-1]
    env = {**_env_file(), **{k: str(v) for k, v in gw["environment"].items()}}
    assert all(_field(k) for k in env), [k for k in env if not _field(k)]
    assert REQUIRED - {"UCPGW_VERBS_NONCE_SECRET"} <= env.keys() and env["UCPGW_KEK_FILE"].startswith("/run/ucpgw/")
    resolved = {k: re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", v) for k, v in env.items()}
    s = _settings({**resolved, "UCPGW_VERBS_NONCE_SECRET": "x" * 32})
    assert str(s.port) in gw["expose"] and str(s.metrics_port) in gw["expose"]
    # the secrets service writes exactly the files the gateway reads, into the volume it mounts
    script = svc["secrets"]["command"][0]
    assert '"kek-ring"' in script and '"nonce"' in script and "KekRing.new_entry" in script
    assert svc["secrets"]["volumes"] == ["ucpgw-secrets:/run/ucpgw"] and "ucpgw-secrets:/run/ucpgw:ro" in gw["volumes"]
    # one published port, the proxy's, to the gateway service's port
    proxy = svc["proxy"]
    assert proxy["ports"] == [f"{s.port}:{s.port}"] and proxy["depends_on"]["gateway"]["condition"] == "service_healthy"
    conf = (DEPLOY / "nginx.conf").read_text()
    assert f"server gateway:{s.port}" in conf and f"listen {s.port};" in conf and "proxy_set_header Host" in conf
    assert set(compose["volumes"]) == {"pgdata", "ucpgw-secrets"}


def test_the_image_exposes_the_ports_and_checks_readiness():
    text = (DEPLOY / "Dockerfile").read_text()
    s = _settings(_env_file() | {"UCPGW_VERBS_NONCE_SECRET": "x" * 32})
    assert f"EXPOSE {s.port} {s.metrics_port}" in text and f"127.0.0.1:{s.port}/readyz" in text
    assert 'CMD ["ucp-gateway", "serve"]' in text


@pytest.mark.parametrize("name", ["UCPGW_NOT_A_SETTING", "UCPGW_PORTS"])
def test_an_unknown_variable_is_caught(name):
    assert not _field(name)

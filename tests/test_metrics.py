"""Prometheus metrics of a real two-worker gateway (``serve --workers 2 --metrics-port``): one scrape
of the supervisor's listener shows every worker's requests, the signature checks and the webhook
delivery of a signed checkout flow, with no secret and no unbounded label."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .commerce.conftest import Platform, new_key
from .commerce.sigutil import BuyerKey
from .test_cli import CLI, _free_port
from .test_workers import _events, _wait_for

NONCE_SECRET = "metrics-test-nonce-secret-0123456789abcdef"
LABELS = {"route", "method", "operation", "company", "status_class", "status", "code", "proof", "outcome",
          "version", "door", "result", "state", "pool", "le"}  # fmt: skip
ROUTE = re.compile(r"^(/[A-Za-z0-9_.\-{}]*)+$|^unmatched$")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _gateway(data_dir: Path, log: Path, port: int, metrics_port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
    env.update(
        UCPGW_LOG_LEVEL="info",
        UCPGW_DEV_PROFILE_HOSTS='["127.0.0.1"]',  # the test platform's plain-http profile and webhook
        UCPGW_VERBS_NONCE_SECRET=NONCE_SECRET,
        UCPGW_METRICS_INTERVAL="0.3",
        UCPGW_WEBHOOK_POLL_INTERVAL="0.2",
    )
    with log.open("w") as err:
        return subprocess.Popen(
            [*CLI, "serve", "--demo", "--workers", "2", "--data-dir", str(data_dir), "--port", str(port),
             "--metrics-port", str(metrics_port)],
            stdout=subprocess.DEVNULL, stderr=err, env=env,
        )  # fmt: skip


async def _signed(http, buyer, port: int, method: str, path: str, body: dict | None = None) -> dict:
    raw = json.dumps(body).encode() if body is not None else b""
    h = {"UCP-Agent": f'profile="{buyer.base}/profile/a.json"', "Idempotency-Key": new_key()}
    if body is not None:
        h["Content-Type"] = "application/json"
    url = f"http://127.0.0.1:{port}{path}"
    h = buyer.key.sign(method, url, h, raw)
    async with http.request(method, url, data=raw or None, headers=h) as r:
        out = await r.json()
        assert r.status in (200, 201), out
        return out


async def _flow(http, buyer, port: int) -> tuple[str, str]:
    """A signed create -> update -> complete of the demo shop; returns (checkout id, order id)."""
    base = "/ucp/v1/checkout-sessions"
    create = {"line_items": [{"item": {"id": "pot_ceramic"}, "quantity": 1}]}
    co = await _signed(http, buyer, port, "POST", base, create)
    dest = {"id": "home", "street_address": "1 Elm St", "address_locality": "Springfield", "postal_code": "62704",
            "address_country": "US"}  # fmt: skip
    upd = {**create, "fulfillment": {"methods": [{"type": "shipping", "destinations": [dest],
                                                  "selected_destination_id": "home"}]}}  # fmt: skip
    co = await _signed(http, buyer, port, "PUT", f"{base}/{co['id']}", upd)
    group = co["fulfillment"]["methods"][0]["groups"][0]
    upd["fulfillment"]["methods"][0]["groups"] = [{"id": group["id"], "selected_option_id": group["options"][0]["id"]}]
    co = await _signed(http, buyer, port, "PUT", f"{base}/{co['id']}", upd)
    assert co["status"] == "ready_for_complete", co
    pay = {"payment": {"instruments": [{"id": "instr_1", "handler_id": "mock_payment_handler", "type": "card",
                                        "credential": {"type": "token", "token": "success_token"}}]}}  # fmt: skip
    done = await _signed(http, buyer, port, "POST", f"{base}/{co['id']}/complete", pay)
    assert done["status"] == "completed", done
    return co["id"], done["order"]["id"]


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(samples, name: str, **labels) -> float:
    """The sum of ``name`` over the samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def _scrape(http, metrics_port: int) -> str:
    async with http.get(f"http://127.0.0.1:{metrics_port}/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        return await r.text()


async def test_one_scrape_shows_both_workers_a_signed_flow_and_its_webhook(tmp_path):
    key = BuyerKey()
    buyer = await Platform(signing_keys=[dict(key.jwk)]).start()
    buyer.key = key
    port, metrics_port = _free_port(), _free_port()
    log = tmp_path / "serve.log"
    proc = _gateway((tmp_path / "gw").resolve(), log, port, metrics_port)
    try:
        await asyncio.to_thread(_wait_for, log, proc, lambda e: e.get("event") == "listening" and e.get("workers") == 2)
        async with aiohttp.ClientSession() as http:
            for _ in range(40):  # a new connection each: the kernel spreads them over the two workers
                async with aiohttp.ClientSession() as one, one.get(f"http://127.0.0.1:{port}/readyz") as r:
                    assert r.status == 200
            checkout_id, order_id = await _flow(http, buyer, port)
            deadline = time.monotonic() + 60
            while True:  # the order webhook reaches the platform, and its delivery is counted
                text = await _scrape(http, metrics_port)
                samples = _samples(text)
                if buyer.received and _value(samples, "ucpgw_webhook_deliveries_total", result="delivered") >= 1:
                    break
                assert time.monotonic() < deadline, text[-3000:]
                await asyncio.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        await buyer.runner.cleanup()

    served = {e["worker"] for e in _events(log) if e.get("event") == "request" and e.get("path") == "/readyz"}
    assert served == {0, 1}, "both workers served /readyz"
    # every worker's requests in one scrape: all 40, whichever worker answered
    assert _value(samples, "ucpgw_http_responses_total", route="/readyz", status="200") == 40
    flow = {"company": "flower-shop", "status_class": "2xx"}
    count = "ucpgw_http_request_duration_seconds_count"
    assert _value(samples, count, operation="create_checkout", route="/ucp/v1/checkout-sessions", **flow) == 1
    assert _value(samples, count, operation="update_checkout", method="PUT", **flow) == 2
    assert _value(samples, count, operation="complete_checkout", **flow) == 1
    # the SLO buckets: 1 s, 4 s, 6 s and 10 s are bucket bounds
    les = {dict(ls).get("le") for (n, ls) in samples if n == "ucpgw_http_request_duration_seconds_bucket"}
    assert {"1.0", "4.0", "5.0", "6.0", "10.0", "+Inf"} <= les
    assert _value(samples, "ucpgw_signature_checks_total", proof="signature", outcome="verified") == 4
    assert _value(samples, "ucpgw_response_signatures_total", outcome="signed") >= 1
    assert _value(samples, "ucpgw_negotiations_total", version="2026-04-08", outcome="ok") >= 4
    assert _value(samples, "ucpgw_consent_decisions_total", outcome="execute") >= 4
    assert _value(samples, "ucpgw_signing_keys", company="flower-shop", state="active") == 1
    assert _value(samples, "ucpgw_db_pool_connections", state="max") > 0
    assert _value(samples, "ucpgw_db_pool_acquire_seconds_count") > 0

    # no secret, no id, no caller in the text; every label is one of the bounded kinds
    for secret in (NONCE_SECRET, "success_token", checkout_id, order_id, buyer.base, "Bearer", key.jwk["x"]):
        assert secret not in text
    assert not UUID.search(text)
    for (_, labels), _v in samples.items():
        for name, value in labels:
            assert name in LABELS, name
            assert len(value) <= 64, (name, value)
            if name == "route":
                assert ROUTE.match(value) and not any(ch.isdigit() for ch in value.replace("v1", "")), value

"""The SLO view: traffic through the real app is counted per company and UCP operation, flushed to
request_slo_minutes, and read back as p50/p95 and availability against the platforms' targets
(admin API and CLI); the quantile arithmetic on known histograms."""

from __future__ import annotations

import json
import time

import pytest

from ucp_gateway import metrics
from ucp_gateway.commerce.slo import evaluate, parse_since, quantile
from ucp_gateway.errors import BadRequest
from ucp_gateway.monitor import flush_slo
from ucp_gateway.verbs.auth import issue_staff_token

from ..test_cli import run
from .conftest import headers, new_key, payload, url


def test_quantile_interpolates_inside_the_bucket():
    counts = [0] * (len(metrics.SLO_BUCKETS) + 1)
    i1 = metrics.SLO_BUCKETS.index(1.0)
    counts[i1] = 10  # ten answers in (0.5, 1] s
    assert quantile(0.5, counts) == pytest.approx(0.75)
    assert quantile(1.0, counts) == pytest.approx(1.0)
    counts[-1] = 10  # and ten above the last bound: p95 is reported as the last bound
    assert quantile(0.95, counts) == metrics.SLO_BUCKETS[-1]
    assert quantile(0.5, [0] * len(counts)) is None


def test_evaluate_against_the_targets():
    n = len(metrics.SLO_BUCKETS) + 1
    fast = [0] * n
    fast[metrics.SLO_BUCKETS.index(0.1)] = 100
    assert evaluate("create_checkout", 100, 0, fast)["meets"] is True
    slow = [0] * n
    slow[metrics.SLO_BUCKETS.index(2.0)] = 100  # p50 in (1, 2] s: over create's 1 s
    r = evaluate("create_checkout", 100, 0, slow)
    assert (r["meets"], r["p50_target"], r["p95_target"]) == (False, 1.0, 4.0)
    assert evaluate("complete_checkout", 100, 0, slow)["meets"] is True  # complete: 6 s / 10 s
    down = evaluate("complete_checkout", 100, 6, fast)  # 94 % available
    assert down["availability"] == pytest.approx(0.94) and down["meets"] is False
    assert "p50_target" not in evaluate("get_order", 1, 0, fast)


def test_since_is_a_bounded_duration():
    assert parse_since("90m").total_seconds() == 5400
    for bad in ("", "1", "0h", "1w", "-1h", "32d"):
        with pytest.raises(BadRequest):
            parse_since(bad)


async def test_traffic_is_counted_flushed_and_read_back(client, database, company, db_settings, tmp_path):
    metrics.take_slo_pending()  # what earlier tests in this process counted
    took = []
    for _ in range(6):
        t0 = time.perf_counter()
        r = await client.post(url("/checkout-sessions"), json=payload(), headers=headers(key=new_key()))
        took.append(time.perf_counter() - t0)
        assert r.status == 201, await r.text()
    co = await r.json()
    r = await client.get(url(f"/checkout-sessions/{co['id']}"), headers=headers())
    assert r.status == 200
    assert await flush_slo(database.pool) == 2  # one row per (company, operation, minute)
    token = await issue_staff_token(database.pool, company.id, "employee", "ops")
    auth = {"Authorization": f"Bearer {token}"}
    r = await client.get("/admin/v1/slo?since=1h", headers=auth)
    body = await r.json()
    assert r.status == 200, body
    ops = {o["operation"]: o for o in body["operations"]}
    assert set(ops) == {"create_checkout", "get_checkout"}
    create = ops["create_checkout"]
    assert (create["requests"], create["errors"], create["availability"]) == (6, 0, 1.0)
    # the server's durations are within the client's, up to the bucket bound above the slowest
    bound = next(b for b in metrics.SLO_BUCKETS if b >= max(took))
    assert 0 < create["p50"] <= create["p95"] <= bound
    assert create["meets"] is True and create["p50_target"] == 1.0
    assert ops["get_checkout"]["requests"] == 1
    r = await client.get("/admin/v1/slo?since=forever", headers=auth)
    assert r.status == 400 and (await r.json())["code"] == "invalid_request"
    r = await client.get("/admin/v1/slo")
    assert r.status == 401

    # the CLI reads the same rows (the test database, as the app's owner)
    proc = run(["slo", "--since", "1h", "--company", company.slug, "--json"],
               {"DATABASE_URL": db_settings.database_url, "UCPGW_ENVIRONMENT": "development",
                "UCPGW_DATA_DIR": str(tmp_path)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (c,) = out["companies"]
    assert c["company"] == company.slug
    assert {o["operation"]: o["requests"] for o in c["operations"]} == {"create_checkout": 6, "get_checkout": 1}

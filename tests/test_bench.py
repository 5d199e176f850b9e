"""The benchmark's own arithmetic (bench/ is no package: loaded from its file)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "bench" / "checkout_flow.py"


def _bench():
    spec = importlib.util.spec_from_file_location("checkout_flow_bench", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cpu_delta_leaves_out_processes_that_exited():
    """Regression: the CPU of the PostgreSQL processes was a difference of sums, so a process that
    exited during the window (an autovacuum worker) took its whole past off: -0.7 ms per flow."""
    bench = _bench()
    before = {10: 5.0, 11: 3.0}  # 11 exits during the window
    after = {10: 6.25, 12: 0.5}  # 12 starts during it
    assert bench.cpu_delta(before, after) == 1.75
    assert bench.cpu_delta({}, {}) == 0.0


def test_cpu_times_reads_this_process_and_its_children():
    import os

    bench = _bench()
    times = bench._cpu_times([os.getpid(), 2**22 + 7])  # the second pid is no process: skipped
    assert set(times) >= {os.getpid()} and times[os.getpid()] > 0


def test_mean_ci95_is_the_student_t_interval():
    bench = _bench()
    mean, half = bench.mean_ci95([0.20, 0.30, 0.25])
    # stdev 0.05, n 3, t(2) = 4.30: 4.30 * 0.05 / sqrt(3)
    assert abs(mean - 0.25) < 1e-12 and abs(half - 4.30 * 0.05 / 3**0.5) < 1e-12
    mean, half = bench.mean_ci95([0.1] * 11 + [0.4])  # df 11: the t of df 10 (the next lower entry)
    assert abs(half - 2.23 * __import__("statistics").stdev([0.1] * 11 + [0.4]) / 12**0.5) < 1e-12
    assert bench.mean_ci95([0.3, 0.3]) == (0.3, 0.0)


def test_disk_summary_counts_stalls():
    bench = _bench()
    lat = [0.001] * 97 + [0.06, 0.2, 1.5]
    assert bench.disk_summary(lat) == "fdatasync p99 200.0 ms, max 1500.0 ms, 3 of 100 over 50 ms"
    assert bench.disk_summary([]) == "fdatasync: no sample"


def test_disk_probe_times_syncs_and_removes_its_file(tmp_path):
    import time

    bench = _bench()
    with bench.DiskProbe(tmp_path, interval=0.005) as probe:
        time.sleep(0.2)
    assert len(probe.latencies) >= 3 and all(0 < x < 5 for x in probe.latencies)
    assert list(tmp_path.iterdir()) == []


async def test_buyer_signatures_verify_with_the_gateways_reference_verifier():
    """The load generator's signer (templates cached per request shape, digests per body) signs
    what the gateway's reference path verifies, for every shape the flow sends; a changed value fails."""
    import datetime as dt

    import pytest
    from multidict import CIMultiDict

    from ucp_gateway.errors import GatewayError
    from ucp_gateway.httpsig.policy import SignaturePolicy
    from ucp_gateway.httpsig.resolver import StaticKeyResolver
    from ucp_gateway.httpsig.rfc9421 import RequestView
    from ucp_gateway.httpsig.verify import verify_request

    bench = _bench()
    buyer = bench.Buyer(3, "http://127.0.0.1:9")
    resolver = StaticKeyResolver({buyer.profile: [buyer.jwk]})
    policy = SignaturePolicy(allow_http_profiles=True)
    authority = "shop.example:8080"

    async def verify(method, path, body, key, **change):
        h = buyer.headers(method, authority, path, body, key, True)
        h.update(change)
        headers = CIMultiDict({"Host": authority, **h})
        view = RequestView(method, f"http://{authority}{path}", headers, body)
        return await verify_request(view, resolver, policy, dt.datetime.now(dt.UTC))

    create, update, pay = buyer.bodies
    for method, path, body, key in (
        ("POST", "/ucp/v1/checkout-sessions", create, "k-1"),
        ("PUT", "/ucp/v1/checkout-sessions/chk_1", update, "k-2"),
        ("POST", "/ucp/v1/checkout-sessions/chk_1/complete", pay, "k-3"),
        ("GET", "/ucp/v1/checkout-sessions/chk_1", b"", None),
    ):
        sig = await verify(method, path, body, key)
        assert sig.kid == buyer.kid and sig.profile_url == buyer.profile
    with pytest.raises(GatewayError) as err:
        await verify("POST", "/ucp/v1/checkout-sessions", create, "k-1", **{"Idempotency-Key": "k-other"})
    assert err.value.code == "signature_invalid"


def test_flow_inproc_unsigned_places_orders():
    """Regression: without the signature component the app answered 500 (discovery's trust check
    reads httpsig's block cache), and an unproven agent's complete handed off to the buyer instead
    of placing the order. The unsigned mode keeps httpsig's resources, drops only its middleware,
    and the bench company lets an unproven agent complete; a flow that does not complete fails it."""
    import subprocess
    import sys

    script = _PATH.with_name("flow_inproc.py")
    cmd = [sys.executable, str(script), "--mode", "plain", "--flows", "2", "--rounds", "1", "--warmup", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("plain: min ") and "ms CPU/flow" in p.stdout


def test_webhooks_bench_reads_the_signed_saturation_figure_of_checkout_flow():
    spec = importlib.util.spec_from_file_location("webhooks_bench", _PATH.with_name("webhooks.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = (
        "checkout flows (create -> update -> complete), 32 buyer agents, 5 s per run, 1 product\n"
        "(a) saturation: no think time\n"
        "  signed + audited          131.4 flows/s   p50   12.0 ms   p99    80.1 ms   cpu ms/flow: gateway  8.0\n"
        "      disk under the cluster: fine\n"
        "(b) at the target load: think time paced to offer 100 flows/s\n"
        "  signed + audited           97.2 flows/s   p50    9.0 ms   p99    40.0 ms   cpu ms/flow: gateway  8.1\n"
    )
    assert mod.parse_order_rate(out) == 131.4  # the saturation run's, not the paced one's
    import pytest

    with pytest.raises(ValueError):
        mod.parse_order_rate("(b) at the target load\n  signed + audited 97.2 flows/s\n")

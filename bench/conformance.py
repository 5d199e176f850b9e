"""Run the official UCP conformance suite (Universal-Commerce-Protocol/conformance, UCP 2026-04-08)
from a local copy against a running gateway, and print pass/fail/skip per test file.

Nothing is fetched: ``--suite`` is a copy prepared as docs/commerce.md "Conformance" says (fixtures
in place, the suite's 0.4.6 port applied), and ``--python`` is an interpreter with the suite's
dependencies (``ucp-sdk==0.4.6 absl-py httpx fastapi uvicorn pyyaml``). With ``--start-gateway`` the
script starts the demo gateway itself (development, conformance mode, plain http, a fresh data dir)
on ``--server-url``'s port and stops it at the end; otherwise the gateway must already run there.

Each file runs as an absl test module from the suite root, e.g.
``python -m shopping.checkout.lifecycle_test --server_url=... --simulation_secret=...
--mock_webhook_port=8284 --mock_agent_port=8285``; ``Ran N`` / ``failures`` / ``errors`` /
``skipped`` of unittest's summary give the row, and each FAIL/ERROR header names a failing test
(listed under its row). Exit status: 0 when every file ran (failures are
the table's business: see docs/commerce.md for the suite-vs-spec ones), 2 when a file could not run.

Usage: python bench/conformance.py --suite PATH [--python PATH] [--server-url http://localhost:8182]
    [--simulation-secret conf-sim-secret] [--mock-webhook-port 8284] [--mock-agent-port 8285]
    [--start-gateway] [--timeout 600] [--json] [FILE ...]   (FILE: e.g. core/protocol_test.py)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

# the suite's test files, in the order of docs/commerce.md's table (those present are run)
FILES = (
    "core/protocol_test.py",
    "core/binding_test.py",
    "core/security_test.py",
    "core/idempotency_test.py",
    "common/webhooks/webhook_test.py",
    "common/payments/card_credential_test.py",
    "common/payments/ap2_test.py",
    "shopping/checkout/lifecycle_test.py",
    "shopping/checkout/business_logic_test.py",
    "shopping/discount/discount_test.py",
    "shopping/fulfillment/fulfillment_test.py",
    "shopping/order/order_test.py",
    "shopping/validation/validation_test.py",
    "shopping/validation/invalid_input_test.py",
    "protocol_test.py",
    "fulfillment_structure_test.py",
    "totals_test.py",
    "webhook_structure_test.py",
    "cart_test.py",
    "payment_terms_test.py",
)

_RAN = re.compile(r"^Ran (\d+) tests? in", re.M)
_RESULT = re.compile(r"^(OK|FAILED)(?: \(([^)]*)\))?\s*$", re.M)
_FAILED = re.compile(r"^(?:FAIL|ERROR): (\w+) \(", re.M)  # unittest's header of each failure


def summarise(output: str) -> dict[str, int] | None:
    """``{"ran", "pass", "fail", "skip"}`` from unittest's summary lines, None when absent."""
    ran = _RAN.findall(output)
    result = _RESULT.findall(output)
    if not ran or not result:
        return None
    counts = {"failures": 0, "errors": 0, "skipped": 0, "expected failures": 0, "unexpected successes": 0}
    for part in (result[-1][1] or "").split(","):
        name, _, value = part.strip().partition("=")
        if name in counts and value.isdigit():
            counts[name] = int(value)
    total = int(ran[-1])
    failed = counts["failures"] + counts["errors"] + counts["unexpected successes"]
    skipped = counts["skipped"]
    return {"ran": total, "pass": total - failed - skipped, "fail": failed, "skip": skipped}


def failed_tests(output: str) -> list[str]:
    """The names of the tests unittest reported as FAIL or ERROR, in its order, each once."""
    return list(dict.fromkeys(_FAILED.findall(output)))


def run_file(args: argparse.Namespace, rel: str) -> dict[str, object]:
    module = rel.removesuffix(".py").replace("/", ".")
    cmd = [
        args.python,
        "-m",
        module,
        f"--server_url={args.server_url}",
        f"--simulation_secret={args.simulation_secret}",
        f"--mock_webhook_port={args.mock_webhook_port}",
        f"--mock_agent_port={args.mock_agent_port}",
    ]
    try:
        p = subprocess.run(cmd, cwd=args.suite, capture_output=True, text=True, timeout=args.timeout)
        output = p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return {"file": rel, "error": f"timed out after {args.timeout} s"}
    counts = summarise(output)
    if counts is None:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        return {"file": rel, "error": f"exit {p.returncode}: {tail[0][:200]}"}
    return {"file": rel, **counts, "failed": failed_tests(output)}


def _wait_ready(url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the gateway at {url} is not ready")


def start_gateway(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    port = urlsplit(args.server_url).port or 80
    data_dir = tempfile.mkdtemp(prefix="ucpgw-conformance-")
    env = dict(
        os.environ,
        UCPGW_ENVIRONMENT="development",
        UCPGW_CONFORMANCE_MODE="true",
        UCPGW_PUBLIC_SCHEME="http",
        UCPGW_SIMULATION_SECRET=args.simulation_secret,
    )
    exe = shutil.which("ucp-gateway") or str(Path(sys.executable).with_name("ucp-gateway"))
    cmd = [exe, "serve", "--demo", "--port", str(port), "--data-dir", data_dir]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_ready(args.server_url, time.monotonic() + 180)
    return proc, data_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", required=True, type=Path, help="root of a local copy of the conformance suite")
    ap.add_argument("--python", default=sys.executable, help="interpreter with the suite's dependencies")
    ap.add_argument("--server-url", default="http://localhost:8182")
    ap.add_argument("--simulation-secret", default="conf-sim-secret")
    ap.add_argument("--mock-webhook-port", type=int, default=8284)
    ap.add_argument("--mock-agent-port", type=int, default=8285)
    ap.add_argument("--start-gateway", action="store_true", help="start (and stop) the demo gateway")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per file")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    ap.add_argument("files", nargs="*", help="suite-relative test files (default: every known one present)")
    args = ap.parse_args(argv)
    files = args.files or [f for f in FILES if (args.suite / f).is_file()]
    proc = data_dir = None
    if args.start_gateway:
        proc, data_dir = start_gateway(args)
    try:
        rows = [run_file(args, f) for f in files]
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            shutil.rmtree(data_dir, ignore_errors=True)
    totals = {k: sum(int(r.get(k, 0)) for r in rows) for k in ("pass", "fail", "skip")}
    if args.json:
        print(json.dumps({"files": rows, "totals": totals}, indent=2))
    else:
        print(f"{'file':<45} {'pass':>5} {'fail':>5} {'skip':>5}")
        for r in rows:
            if "error" in r:
                print(f"{r['file']:<45} error: {r['error']}")
            else:
                print(f"{r['file']:<45} {r['pass']:>5} {r['fail']:>5} {r['skip']:>5}")
                for name in r["failed"]:
                    print(f"    failed: {name}")
        print(f"{'total':<45} {totals['pass']:>5} {totals['fail']:>5} {totals['skip']:>5}")
    return 2 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

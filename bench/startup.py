"""Startup benchmark: median time from process start to the first /readyz 200, embedded PostgreSQL.

cold = a new, empty data dir each run (initdb + migrations + demo seed);
warm = the same data dir again (server start + migration check).
Targets on the 2-core reference machine: cold < 6 s, warm < 3 s.

Usage: python bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_start(data_dir: str) -> float:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
    env["UCPGW_LOG_LEVEL"] = "warning"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ucp_gateway.cli", "serve", "--demo", "--data-dir", data_dir, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"gateway exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except OSError:
                time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="ucpgw-bench-")
    try:
        cold = []
        for i in range(args.runs):
            cold.append(one_start(os.path.join(root, f"cold{i}")))
        warm_dir = os.path.join(root, "cold0")
        warm = [one_start(warm_dir) for _ in range(args.runs)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"startup (embedded PostgreSQL, serve --demo), {args.runs} runs each")
    print(f"  cold: median {statistics.median(cold):.2f} s  (min {min(cold):.2f}, max {max(cold):.2f})  target < 6 s")
    print(f"  warm: median {statistics.median(warm):.2f} s  (min {min(warm):.2f}, max {max(warm):.2f})  target < 3 s")


if __name__ == "__main__":
    main()

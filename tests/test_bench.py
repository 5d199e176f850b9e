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

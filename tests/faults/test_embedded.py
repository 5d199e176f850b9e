"""The embedded PostgreSQL under faults, with real processes: restarted by its supervisor when it
dies, and stopped by a clean stop, also after an earlier ``kill -9`` of the gateway."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil

from ucp_gateway.db.embedded import prune_dead_handles, restart_delay

from .procs import Gateway, _postgres_procs


def test_killed_postgres_is_restarted_and_a_clean_stop_after_kill9_stops_it(tmp_path):
    data_dir = (tmp_path / "gw").resolve()
    first = Gateway(data_dir, tmp_path / "first.log").start()
    try:
        first.wait_listening()
        old = first.postmaster_pid()
        os.kill(old, signal.SIGKILL)  # the database dies under a running gateway
        t0 = time.monotonic()
        first.wait_for(lambda e: e.get("event") == "embedded_postgres_died", 10)
        first.wait_for(lambda e: e.get("event") == "embedded_postgres_restarted", 60)
        while first.get("/readyz")[0] != 200:  # back without a restart of the gateway
            assert time.monotonic() - t0 < 60, first.tail()
            time.sleep(0.1)
        assert first.postmaster_pid() != old
        events = [e["event"] for e in first.events()]
        assert events.count("embedded_postgres_died") == 1 and events.count("database_unavailable") <= 1, events
        assert "Traceback" not in first.log.read_text()
        first.kill9()  # the gateway dies; its postgres stays up (nothing can stop it at SIGKILL)
        assert _postgres_procs(data_dir)
        second = Gateway(data_dir, tmp_path / "second.log", port=first.port).start()
        second.wait_listening()  # attaches to the running server
        assert second.stop() == 0
        deadline = time.monotonic() + 15
        while _postgres_procs(data_dir):  # regression: the dead gateway's handle kept it running
            assert time.monotonic() < deadline, [p.info for p in _postgres_procs(data_dir)]
            time.sleep(0.2)
        assert any(e.get("event") == "embedded_postgres_stale_handles" for e in second.events())
    finally:
        for p in _postgres_procs(data_dir):
            p.kill()


def test_prune_dead_handles_keeps_the_living(tmp_path):
    dead = psutil.Popen(["true"])
    dead.wait()
    (tmp_path / ".handle_pids.json").write_text(json.dumps([os.getpid(), dead.pid]))
    assert prune_dead_handles(tmp_path) == [dead.pid]
    assert json.loads((tmp_path / ".handle_pids.json").read_text()) == [os.getpid()]
    assert prune_dead_handles(tmp_path / "nowhere") == []


def test_restart_backoff_doubles_to_a_cap():
    assert [restart_delay(n) for n in range(7)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]

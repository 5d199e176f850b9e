"""The embedded PostgreSQL under faults, with real processes: restarted by its supervisor when it
dies, and stopped by a clean stop, also after an earlier ``kill -9`` of the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time

import asyncpg
import psutil

from ucp_gateway.db.embedded import (
    _shm_attached,
    embedded_alive,
    postmaster_running,
    prune_dead_handles,
    restart_delay,
    start_embedded,
    stop_embedded,
    supervise_embedded,
)

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


def _stranger() -> psutil.Popen:
    """A live process that is not ours: what a dead holder's or postmaster's pid may be reused by."""
    return psutil.Popen(["sleep", "120"])


def _wait_gone(data_dir, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while _postgres_procs(data_dir):
        assert time.monotonic() < deadline, [p.info for p in _postgres_procs(data_dir)]
        time.sleep(0.1)


def test_a_reused_holder_pid_is_dropped_and_the_last_clean_stop_stops_postgres(tmp_path):
    """Regression: a holder pid that another process reused counted as a live holder for ever, so
    the last clean stop left the embedded PostgreSQL running."""
    data_dir = (tmp_path / "gw").resolve()
    pgdata = data_dir / "pg"
    stranger = _stranger()
    try:
        server, _ = asyncio.run(start_embedded(data_dir))  # makes the data directory
        asyncio.run(stop_embedded(server))
        _wait_gone(data_dir)
        # a gateway that died by kill -9 (it never let go) and whose pid the stranger now has: the
        # holder recorded a start time before the stranger's
        (pgdata / ".handle_pids.json").write_text(json.dumps([stranger.pid]))
        (pgdata / ".handle_starts.json").write_text(json.dumps({str(stranger.pid): stranger.create_time() - 100}))
        again, _ = asyncio.run(start_embedded(data_dir))  # drops the stranger, starts the server
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == [os.getpid()]
        asyncio.run(stop_embedded(again))  # the last holder: stops it
        _wait_gone(data_dir)
        assert stranger.is_running()
        # a listed pid without a record (a holder that is not this gateway) counts while it runs
        (pgdata / ".handle_pids.json").write_text(json.dumps([stranger.pid]))
        (pgdata / ".handle_starts.json").write_text("{}")
        assert prune_dead_handles(pgdata) == []
    finally:
        stranger.kill()
        for p in _postgres_procs(data_dir):
            p.kill()


def test_a_dead_postmaster_whose_pid_was_reused_is_restarted_and_the_stranger_left_alone(tmp_path):
    """Regression: ``postmaster.pid`` naming a pid another process reused was taken for a running
    server, so the supervisor never restarted it (and a stop signalled the stranger)."""
    data_dir = (tmp_path / "gw").resolve()
    pgdata = data_dir / "pg"
    stranger = _stranger()

    def reuse_pid() -> None:  # the dead postmaster's pid file now names the stranger
        lines = (pgdata / "postmaster.pid").read_text().split("\n")
        (pgdata / "postmaster.pid").write_text("\n".join([str(stranger.pid), *lines[1:]]))

    async def scenario() -> None:
        server, _ = await start_embedded(data_dir)
        old = server.get_pid()
        assert postmaster_running(old, pgdata) and not postmaster_running(stranger.pid, pgdata)
        shmid = int((pgdata / "postmaster.pid").read_text().split("\n")[6].split()[-1])
        assert _shm_attached(shmid) > 0  # the interlock a start checks before the pid file goes
        os.kill(old, signal.SIGKILL)
        _wait_gone(data_dir)  # the postmaster and its backends
        reuse_pid()
        server._postmaster_info.pid = stranger.pid  # what pgserver reads back from the file
        assert not embedded_alive(server)
        watch = asyncio.create_task(supervise_embedded(server, interval=0.05))
        try:
            deadline = time.monotonic() + 60
            while not embedded_alive(server):
                assert time.monotonic() < deadline, (pgdata / "log").read_text()[-2000:]
                await asyncio.sleep(0.1)
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        assert server.get_pid() not in (old, stranger.pid)
        conn = await asyncpg.connect(server.get_uri())
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()
        # it dies again, its pid reused again: a clean stop signals nobody
        os.kill(server.get_pid(), signal.SIGKILL)
        _wait_gone(data_dir)
        reuse_pid()
        await stop_embedded(server)

    try:
        asyncio.run(scenario())
        time.sleep(0.5)
        assert stranger.is_running() and stranger.status() != psutil.STATUS_ZOMBIE
    finally:
        stranger.kill()
        for p in _postgres_procs(data_dir):
            p.kill()

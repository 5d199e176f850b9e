"""``serve --workers N``: one port served by N processes, crashed workers restarted, clean stop."""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil

from ucp_gateway.workers import RestartBudget

from .test_cli import CLI, _free_port, _postgres_procs, assert_one_line_error, run


def _events(log: Path) -> list[dict]:
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _wait_for(log: Path, proc, pred, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hit = next((e for e in _events(log) if pred(e)), None)
        if hit is not None:
            return hit
        assert proc.poll() is None, f"supervisor exited: {log.read_text()[-2000:]}"
        time.sleep(0.1)
    raise AssertionError(f"timed out; log tail: {log.read_text()[-2000:]}")


def _second(log: Path, worker: int) -> bool:
    return sum(1 for e in _events(log) if e.get("event") == "listening" and e.get("worker") == worker) >= 2


def _get(port: int, path: str = "/healthz") -> int:
    # a new connection each time: SO_REUSEPORT spreads connections, not requests
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.status


def _supervisor(data_dir: Path, log: Path, port: int) -> subprocess.Popen:
    """``serve --demo --workers 2`` on its own embedded database; JSON log lines go to ``log``."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
    env["UCPGW_LOG_LEVEL"] = "info"  # one access-log line per request, tagged with the worker
    with log.open("w") as err:
        return subprocess.Popen(
            [*CLI, "serve", "--demo", "--workers", "2", "--data-dir", str(data_dir), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )


def test_workers_share_the_port_restart_a_crashed_worker_and_stop_cleanly(tmp_path):
    data_dir = (tmp_path / "gw").resolve()
    log = tmp_path / "serve.log"
    port = _free_port()
    proc = _supervisor(data_dir, log, port)
    try:
        _wait_for(log, proc, lambda e: e.get("event") == "listening" and e.get("workers") == 2)
        assert "seeded demo company" in log.read_text()  # worker 0 seeded before worker 1 started
        pids = {e["worker"]: e["pid"] for e in _events(log) if e.get("event") == "worker_started"}
        assert set(pids) == {0, 1} and len(set(pids.values())) == 2
        # One listening socket: the kernel hands each connection to whichever worker accepts first,
        # with no promise of turns; on a busy machine 40 in a row went to one (a flaky check). Both
        # must take some within 400 connections.
        served: set[int] = set()
        for _ in range(20):
            assert all(_get(port) == 200 for _ in range(20))
            served = {e["worker"] for e in _events(log) if e.get("event") == "request" and e.get("path") == "/healthz"}
            if served == {0, 1}:
                break
        assert served == {0, 1}, "both workers take connections on the one port"
        # regression (newcomer): with SO_REUSEPORT a second server joined the port and answered from
        # its own database; the one inherited listening socket keeps the port exclusive
        for extra in (["--workers", "2"], []):
            other = run(["serve", *extra, "--port", str(port), "--data-dir", str(tmp_path / "other")])
            assert_one_line_error(other, f"port {port} on 127.0.0.1 is already in use")

        os.kill(pids[1], signal.SIGKILL)  # a crash, not a shutdown
        _wait_for(log, proc, lambda e: e.get("event") == "worker_exited" and e.get("worker") == 1)
        again = _wait_for(
            log, proc, lambda e: e.get("event") == "worker_started" and e.get("worker") == 1 and e["pid"] != pids[1]
        )
        # the new worker 1 opens its pool, then listens (its second "listening" line)
        _wait_for(log, proc, lambda e: e.get("event") == "listening" and e.get("worker") == 1 and _second(log, 1))
        assert all(_get(port) == 200 for _ in range(10))
        live = [again["pid"], pids[0]]
        assert all(psutil.pid_exists(p) for p in live)
        assert _postgres_procs(data_dir), "the supervisor's embedded postgres serves every worker"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()[-2000:]
    events = _events(log)
    assert sum(1 for e in events if e.get("event") == "stopped" and "worker" in e) >= 2  # graceful, not killed
    assert not any(e.get("event") == "worker_killed" for e in events)
    for pid in live:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    deadline = time.monotonic() + 10
    while _postgres_procs(data_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _postgres_procs(data_dir) == [], "a postgres process outlived the supervisor"


def test_workers_refuse_a_port_held_by_another_listener(tmp_path):
    with socket.socket() as s:  # no SO_REUSEPORT: the workers must not share its port
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        # refused at bind time, before any database or worker is started
        proc = run(["serve", "--workers", "2", "--port", str(port), "--data-dir", str(tmp_path)])
        assert_one_line_error(proc, f"port {port} on 127.0.0.1 is already in use")


def test_workers_must_fit_the_servers_connections(tmp_path):
    """Regression (newcomer): --workers 64 started 64 pools of 10 on a 100-connection server and
    failed worker by worker with a misleading password hint; now one line before any worker starts."""
    args = ["serve", "--demo", "--workers", "11", "--port", str(_free_port()), "--data-dir", str(tmp_path / "gw")]
    proc = run(args, env_extra={"UCPGW_DB_POOL_MAX": "10"})
    assert_one_line_error(proc, "11 workers x db_pool_max 10 connections (+10 spare) exceed PostgreSQL's")
    assert "max_connections 100" in proc.stderr
    assert _postgres_procs((tmp_path / "gw").resolve()) == []


def test_workers_setting_is_bounded():
    proc = run(["serve", "--workers", "0"], {})
    assert_one_line_error(proc, "invalid setting workers")


def test_restart_budget_allows_limit_restarts_per_window():
    budget = RestartBudget(limit=3, window=60.0)
    assert [budget.allow(t) for t in (0.0, 1.0, 2.0, 3.0)] == [True, True, True, False]
    assert budget.allow(60.5)  # the restart at 0.0 left the window (3.0 was refused, not counted)
    assert budget.allow(61.0)  # and the one at 1.0
    assert not budget.allow(61.5)  # 2.0, 60.5 and 61.0 are still within 60 s
    assert budget.allow(200.0)


def test_workers_stop_when_the_supervisor_is_killed_and_a_restart_reuses_the_data(tmp_path):
    data_dir = (tmp_path / "gw").resolve()
    procs = []
    try:
        for attempt in ("killed", "restarted"):
            log = tmp_path / f"{attempt}.log"
            port = _free_port()
            proc = _supervisor(data_dir, log, port)
            procs.append(proc)
            _wait_for(log, proc, lambda e: e.get("event") == "listening" and e.get("workers") == 2)
            assert _get(port, "/.well-known/ucp") == 200
            workers = [e["pid"] for e in _events(log) if e.get("event") == "worker_started"]
            if attempt == "restarted":
                break
            proc.kill()  # SIGKILL: no chance to stop its workers
            proc.wait(timeout=10)
            deadline = time.monotonic() + 15
            while any(_alive(p) for p in workers) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not any(_alive(p) for p in workers), "orphaned workers kept serving"
            assert any(e.get("event") == "supervisor_gone" for e in _events(log))
            # the rate limiter's shared block: unlinked by multiprocessing's resource tracker once
            # the killed supervisor's workers are gone too
            block = f"/dev/shm/ucpgw_rl_{proc.pid}_*"
            while glob.glob(block) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert glob.glob(block) == [], "a killed supervisor's shared memory block outlived its workers"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
    assert procs[-1].returncode == 0
    # the killed supervisor's embedded server was reused, and outlives the restart as after a killed
    # single-process serve (pgserver stops only a server its process started): stop it here
    for p in _postgres_procs(data_dir):
        if "-D" in p.cmdline():  # the postmaster
            p.terminate()
            p.wait(timeout=30)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _client_loop(port: int, outcomes: list, done) -> None:
    """GET /.well-known/ucp on a new connection each time, until ``done``; each outcome is the
    status, "refused", or the name of any other error (a reset, an incomplete answer)."""
    import http.client

    while not done.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/.well-known/ucp", headers={"Connection": "close"})
            resp = conn.getresponse()
            resp.read()
            outcomes.append(resp.status)
        except ConnectionRefusedError:
            outcomes.append("refused")
            time.sleep(0.01)
        except Exception as exc:  # every other outcome is a failure, named
            outcomes.append(type(exc).__name__)
        finally:
            conn.close()


def test_sigterm_under_load_answers_or_refuses_every_connection(tmp_path):
    """Regression (newcomer): on SIGTERM the supervisor kept its copy of the listening socket open
    about a second after the workers stopped accepting; what queued meanwhile was reset when it
    closed (one ConnectionResetError per client loop). Now every request gets its whole answer or
    "connection refused", as with one process, but for at most one reset (a handshake completing
    between the last accept and the close), and every process exits 0 within the grace."""
    import threading

    data_dir = (tmp_path / "gw").resolve()
    log = tmp_path / "serve.log"
    port = _free_port()
    proc = _supervisor(data_dir, log, port)
    done, loops = threading.Event(), []
    try:
        _wait_for(log, proc, lambda e: e.get("event") == "listening" and e.get("workers") == 2)
        workers = [e["pid"] for e in _events(log) if e.get("event") == "worker_started"]
        outs: list[list] = [[] for _ in range(4)]
        loops = [(out, threading.Thread(target=_client_loop, args=(port, out, done))) for out in outs]
        for _, thread in loops:
            thread.start()
        time.sleep(0.5)  # under load
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        took = time.monotonic() - stopped_at
        time.sleep(0.3)  # the loops see the port refuse
    finally:
        done.set()
        for _, thread in loops:
            thread.join(timeout=15)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    outcomes = [o for out, _ in loops for o in out]
    counts = {o: outcomes.count(o) for o in set(outcomes)}
    # at most one reset: a handshake completing in the microseconds between the last process's
    # final accept and its close (docs/architecture.md, "Left"); once in ~1,250 connections in CI.
    # The bug reset one connection per client loop (4 here); any other error fails at once
    assert {200, "refused"} <= set(outcomes) <= {200, "refused", "ConnectionResetError"}, counts
    assert counts.get("ConnectionResetError", 0) <= 1, counts
    assert all(out[-1] == "refused" and 200 in out for out, _ in loops)
    assert proc.returncode == 0 and took < 10.0, (proc.returncode, took)  # shutdown_timeout: 10 s
    events = _events(log)
    assert sum(1 for e in events if e.get("event") == "stopped" and "worker" in e) == 2
    assert not any(e.get("event") in ("worker_killed", "worker_exited") for e in events)
    assert not any(_alive(p) for p in workers)
    deadline = time.monotonic() + 10
    while _postgres_procs(data_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _postgres_procs(data_dir) == [], "a postgres process outlived the supervisor"

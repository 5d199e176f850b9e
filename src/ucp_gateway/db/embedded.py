"""The embedded PostgreSQL server (``pgserver``), used when no ``DATABASE_URL`` is configured.

Data lives under ``<data_dir>/pg`` and survives restarts. The server listens only on a Unix socket:
no TCP port is opened.

Lifecycle:

- :func:`start_embedded` starts the server, or attaches to the one already running on that data
  directory. pgserver counts the processes holding a handle in ``pg/.handle_pids.json`` and the
  last one to let go stops the server; a process that died without letting go (``kill -9``) stays
  counted for ever, so later clean stops left the server running. Dead processes are therefore
  dropped from that list before attaching (:func:`prune_dead_handles`). A pid can be reused by
  another process, so the list alone cannot tell a holder from a stranger: each holder also
  records its process start time in ``pg/.handle_starts.json``, and a listed pid whose process
  started at another time is dropped too. Likewise ``postmaster.pid`` counts only while its pid is
  a ``postgres`` process of this data directory (:func:`postmaster_running`); a stale one is removed
  before a start (PostgreSQL would refuse to start over a live pid, pgserver would attach to it).
- :func:`supervise_embedded` (run by the process that started the server, for as long as it
  serves) checks the server every ``CHECK_INTERVAL`` seconds and starts it again when it died,
  with exponential backoff between failed attempts (a full disk, shared memory still held by a dying
  backend): ``embedded_postgres_died``, then ``embedded_postgres_restarted`` or
  ``embedded_postgres_restart_failed`` (with the next delay), one line each.
- :func:`stop_embedded` stops the server when this process holds the last handle (clean stop;
  pgserver also registers an ``atexit`` hook as a backstop). Cancel the supervision first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import structlog

from ..errors import ConfigError

__all__ = [
    "CHECK_INTERVAL",
    "RESTART_BACKOFF_MAX",
    "embedded_alive",
    "postmaster_running",
    "prune_dead_handles",
    "restart_delay",
    "start_embedded",
    "stop_embedded",
    "supervise_embedded",
]

_log = structlog.get_logger("ucp_gateway.db.embedded")

CHECK_INTERVAL = 0.5  # seconds between liveness checks of the embedded server
RESTART_BACKOFF_MAX = 30.0  # longest wait between two failed restart attempts, seconds


def _check_writable(data_dir: Path) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"data dir {data_dir} is not writable: {exc.strerror or exc}") from None


def _started(pid: int) -> float | None:
    """When process ``pid`` started (psutil's ``create_time``, seconds since the epoch), or None
    when no such process runs (a zombie counts as gone)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time()
    except psutil.Error:
        return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


_STARTS = ".handle_starts.json"  # {pid: start time} of the handle holders (module doc)


def prune_dead_handles(pgdata: Path) -> list[int]:
    """Drop from pgserver's handle list of ``pgdata`` (its ``.handle_pids.json``; call it under
    pgserver's lock) every pid whose process no longer runs, or runs but started at another time
    than the holder recorded (the pid was reused). A pid without a record (a holder that is not
    this gateway) is kept while it runs. Returns the pids dropped."""
    path = pgdata / ".handle_pids.json"
    pids = _read_json(path)
    if not isinstance(pids, list):
        return []
    starts = _read_json(pgdata / _STARTS)
    starts = starts if isinstance(starts, dict) else {}
    live = []
    for pid in pids:
        started = _started(pid) if isinstance(pid, int) else None
        recorded = starts.get(str(pid))
        if started is not None and (not isinstance(recorded, (int, float)) or abs(started - recorded) < 0.01):
            live.append(pid)
    if len(live) != len(pids):
        path.write_text(json.dumps(live))
    kept = {k: v for k, v in starts.items() if k in {str(p) for p in live}}
    if kept != starts:
        (pgdata / _STARTS).write_text(json.dumps(kept))
    return [p for p in pids if p not in live]


def _record_holder(pgdata: Path) -> None:
    """Record this process's start time beside its handle (call it under pgserver's lock)."""
    starts = _read_json(pgdata / _STARTS)
    starts = starts if isinstance(starts, dict) else {}
    starts[str(os.getpid())] = _started(os.getpid())
    (pgdata / _STARTS).write_text(json.dumps(starts))


def postmaster_running(pid: int | None, pgdata: Path) -> bool:
    """True when ``pid`` is a running (not zombie) ``postgres`` process started on ``pgdata``
    (``postgres -D <pgdata>``, as pg_ctl starts it): not merely some process that reuses the pid
    of a dead postmaster."""
    import psutil

    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return bool(cmdline) and Path(cmdline[0]).name == "postgres" and str(pgdata) in cmdline[1:]


def _shm_attached(shmid: int) -> int | None:
    """Processes attached to System V shared memory segment ``shmid`` (Linux ``/proc/sysvipc/shm``,
    its ``nattch``); 0 when the segment is gone, None when that cannot be read."""
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    except OSError:
        return None
    for line in lines[1:]:
        cols = line.split()
        if len(cols) > 6 and cols[1] == str(shmid):
            return int(cols[6])
    return 0


def _clear_stale_postmaster(pgdata: Path) -> None:
    """Remove ``postmaster.pid`` when its pid runs but is not this data directory's postmaster (a
    reused pid: PostgreSQL would refuse to start, pgserver would attach to the stranger), and only
    once no process is attached to the dead server's shared memory any more (the backends it left
    would otherwise write beside a new server: PostgreSQL's own check reads that segment's id from
    this file). A pid that runs no process at all is left to PostgreSQL's own stale-file check.
    Call it under pgserver's lock, before a start."""
    path = pgdata / "postmaster.pid"
    try:
        lines = path.read_text().split("\n")
    except OSError:
        return
    pid = int(lines[0]) if lines[0].strip().isdigit() else None
    if pid is None or _started(pid) is None or postmaster_running(pid, pgdata):
        return
    shm = lines[6].split() if len(lines) > 6 else []
    attached = _shm_attached(int(shm[-1])) if shm and shm[-1].isdigit() else 0
    if attached is None or attached > 0:  # backends still attached, or unknown: not yet (the next attempt may)
        _log.info("embedded_postgres_backends_remain", pid=pid, attached=attached)
        return
    path.unlink(missing_ok=True)
    _log.info("embedded_postgres_stale_pid_file", pid=pid)


def _start(data_dir: Path) -> Any:
    _check_writable(data_dir)
    # pgserver keeps its lock file in the user runtime dir; give it a private one when none is set
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"ucpgw-runtime-{os.getuid()}"))  # noqa: S108
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, exist_ok=True)
    import pgserver  # heavy import (psutil, platformdirs); only when embedded is used

    pgdata = (data_dir / "pg").resolve()
    try:
        with pgserver.PostgresServer._lock:
            dropped = prune_dead_handles(pgdata)
            _clear_stale_postmaster(pgdata)
        if dropped:
            _log.info("embedded_postgres_stale_handles", pids=dropped)
        server = pgserver.get_server(str(pgdata), cleanup_mode="stop")
        with pgserver.PostgresServer._lock:
            _record_holder(pgdata)
        return server
    except Exception as exc:  # pgserver raises CalledProcessError/TimeoutExpired/AssertionError
        log = data_dir / "pg" / "log"
        tail = log.read_text(errors="replace")[-400:] if log.exists() else ""
        raise ConfigError(f"embedded PostgreSQL failed to start in {data_dir / 'pg'}: {exc!s}. {tail}") from None


async def start_embedded(data_dir: Path) -> tuple[Any, str]:
    """Start (or attach to) the embedded server under ``data_dir``.

    Returns: ``(server_handle, owner_dsn)``; the DSN points at the ``postgres`` database over the socket.
    Raises: ConfigError when the directory is unwritable or the server does not start.
    """
    server = await asyncio.to_thread(_start, data_dir)
    return server, server.get_uri()


def _stop(server: Any) -> None:
    from pgserver.utils import PostmasterInfo

    # pgserver signals the pid it last saw: read the pid file again, and forget it unless it names
    # this data directory's postmaster, so a stop never signals a process that reused a dead one's pid
    pgdata = Path(server.pgdata)
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):  # a torn or foreign file: nothing of ours to stop
        info = None
    server._postmaster_info = info if info is not None and postmaster_running(info.pid, pgdata) else None
    server.cleanup()


async def stop_embedded(server: Any) -> None:
    """Stop the embedded server if this process holds the last handle (pgserver's handle counting)."""
    await asyncio.to_thread(_stop, server)


def embedded_alive(server: Any) -> bool:
    """True while the handle's postmaster runs (:func:`postmaster_running`: its pid is a postgres
    process of the handle's data directory, not a zombie nor another process on a reused pid)."""
    info = getattr(server, "_postmaster_info", None)
    return info is not None and postmaster_running(info.pid, Path(server.pgdata))


def restart_delay(failures: int) -> float:
    """Seconds before restart attempt ``failures + 1``: 0 for the first, then 1, 2, 4 ... at most
    :data:`RESTART_BACKOFF_MAX`."""
    return 0.0 if failures <= 0 else min(RESTART_BACKOFF_MAX, 2.0 ** (failures - 1))


class _NotYetGone(Exception):
    """The killed postmaster is still a process (a zombie not yet reaped): pgserver takes it for a
    running server, so nothing was started; tried again after the backoff."""


def _restart(server: Any) -> None:
    with server._lock:  # pgserver's inter-process lock: one process (re)starts a data directory at a time
        _clear_stale_postmaster(Path(server.pgdata))
        server.ensure_postgres_running()
    if not embedded_alive(server):
        raise _NotYetGone


async def supervise_embedded(server: Any, *, interval: float = CHECK_INTERVAL) -> None:
    """Keep the embedded server running until cancelled (module doc). A restart in progress when
    cancelled is waited for, so that a stop right after never races a start."""
    loop = asyncio.get_running_loop()
    failures, died_at = 0, 0.0
    while True:
        await asyncio.sleep(interval if failures == 0 else restart_delay(failures))
        if embedded_alive(server):
            continue
        if failures == 0:
            died_at = time.monotonic()
            _log.error("embedded_postgres_died", pid=server._postmaster_info.pid, pgdata=str(server.pgdata))
        attempt = loop.run_in_executor(None, _restart, server)
        try:
            await asyncio.shield(attempt)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await attempt
            raise
        except Exception as exc:  # pgserver: CalledProcessError, TimeoutExpired, AssertionError
            failures += 1
            _log.warning(
                "embedded_postgres_restart_failed",
                attempt=failures,
                reason=exc.__class__.__name__,
                retry_in=restart_delay(failures),
            )
            continue
        _log.info(
            "embedded_postgres_restarted",
            pid=server.get_pid(),
            attempts=failures + 1,
            down_seconds=round(time.monotonic() - died_at, 3),
        )
        failures = 0

"""``serve --workers N``: N serving processes on one port, under a supervisor process.

One gateway process runs one event loop on one core. With ``workers`` > 1 the ``serve`` process
becomes a supervisor (the pre-fork model): it binds the listening socket (a port in use fails
fast, and no other server can join the port later, as SO_REUSEPORT would let it), creates the
development secrets once (so workers never race to write them), starts the embedded PostgreSQL and
applies migrations when no ``database_url`` is set, checks that N pools fit the server's
``max_connections``, then spawns the workers. Each worker is a full gateway (``run_server``)
accepting on the inherited socket. Worker 0 starts first and seeds the demo (``--demo``), the
others after it is ready.

Supervision: a worker that dies is restarted (checked every second), at most ``MAX_RESTARTS`` times per
``RESTART_WINDOW`` seconds (then the supervisor shuts everything down and exits 1, since a worker
that keeps crashing would otherwise hide the fault). A worker that fails before it is ready (port
in use, database refused) stops the start-up with exit code 1. SIGINT/SIGTERM: the supervisor closes
its copy of the listening socket at once, then every worker gets SIGTERM and shuts down gracefully
(``shutdown_timeout``); stragglers are killed; the embedded PostgreSQL stops last. The socket stops
listening (new connections are refused) when the last worker closes its copy, right after taking
the connections still queued (``serve.stop_accepting``), so none is reset unserved. Workers ignore
SIGINT (a Ctrl-C reaches the whole process group): the supervisor must close its copy first, or
what queues after the workers' copies are gone would be reset when it does. A worker whose
supervisor is gone (SIGKILL) shuts itself down within a second or so; the embedded PostgreSQL of a
killed supervisor is left running, as after a killed single-process ``serve``: the next start
reuses it, and its clean stop stops it (``db.embedded``: dead handle holders are forgotten). The
supervisor also restarts the embedded PostgreSQL when it dies (``db.embedded.supervise_embedded``);
the workers' pools reconnect by themselves.

Every worker has its own pool (``Settings.db_pool_size`` connections) and profile and host caches.
What must be shared lives in PostgreSQL: the replay cache, idempotency keys, daily caps, the audit
chain, the webhook outbox (claimed with SKIP LOCKED), the key scheduler (advisory lock) and the rate
limits (ucp_gateway.access.ratelimit), which hold across workers and replicas alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from . import metrics
from .config import Settings
from .errors import ConfigError, GatewayError

__all__ = ["MAX_RESTARTS", "RESTART_WINDOW", "RestartBudget", "supervise"]

_log = structlog.get_logger("ucp_gateway.workers")

MAX_RESTARTS = 5  # restarts of crashed workers allowed per RESTART_WINDOW seconds
RESTART_WINDOW = 60.0
_START_TIMEOUT = 120.0  # seconds a worker may take to open the database and listen
_POLL = 0.1
_SPARE_CONNECTIONS = 10  # migrations, CLI commands and the owner's sessions beside the pools


@dataclass
class RestartBudget:
    """Pure restart policy: at most ``limit`` restarts within any ``window`` seconds."""

    limit: int = MAX_RESTARTS
    window: float = RESTART_WINDOW
    times: list[float] = field(default_factory=list)

    def allow(self, now: float) -> bool:
        """Record a restart at ``now`` (monotonic seconds) and say whether it is allowed."""
        self.times = [t for t in self.times if now - t < self.window]
        if len(self.times) >= self.limit:
            return False
        self.times.append(now)
        return True


def _worker_main(settings: Settings, index: int, ready: Any, seed: bool, sock: socket.socket) -> None:
    """Entry point of a worker process (spawned): serve until SIGTERM/SIGINT or until the supervisor
    is gone (an orphan would keep the port and the database busy); exit 1 on a configuration
    error, printed like the CLI prints it."""
    from .logs import configure_logging
    from .serve import demo_seed_hook, run, run_server

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops the workers (module docstring)
    configure_logging(settings)
    structlog.contextvars.bind_contextvars(worker=index)
    seeder = demo_seed_hook(settings) if seed else None
    supervisor = os.getppid()

    async def before_serve(app: Any) -> None:
        if seeder is not None:
            await seeder(app)
        ready.set()

    async def main() -> None:
        stop = asyncio.Event()

        async def watch_supervisor() -> None:
            while os.getppid() == supervisor:  # re-parented when the supervisor dies  # noqa: ASYNC110
                await asyncio.sleep(1.0)
            _log.error("supervisor_gone", supervisor_pid=supervisor)
            stop.set()

        watcher = asyncio.create_task(watch_supervisor())
        try:
            await run_server(
                settings,
                before_serve=before_serve,
                stop=stop,
                sock=sock,
                signals=(signal.SIGTERM,),
            )
        finally:
            watcher.cancel()

    try:
        run(settings, main())
    except GatewayError as exc:
        print(f"ucp-gateway: error: worker {index}: {exc.message}", file=sys.stderr)
        sys.exit(1)


class _Workers:
    def __init__(self, settings: Settings, sock: socket.socket) -> None:
        self.settings, self.sock = settings, sock
        self.ctx = mp.get_context("spawn")  # a fresh interpreter: no inherited loop, pool or threads
        self.procs: dict[int, Any] = {}
        self.ready: dict[int, Any] = {}

    def start(self, index: int, *, seed: bool = False) -> None:
        ready = self.ctx.Event()
        proc = self.ctx.Process(
            # the socket travels as a duplicated descriptor (multiprocessing's socket reduction)
            target=_worker_main,
            args=(self.settings, index, ready, seed, self.sock),
            name=f"ucp-gateway-worker-{index}",
        )
        proc.start()
        self.procs[index], self.ready[index] = proc, ready
        _log.info("worker_started", worker=index, pid=proc.pid)

    async def wait_ready(self, indexes: list[int], stop: asyncio.Event) -> bool:
        """True when every worker in ``indexes`` is listening; False when one exited first, the
        start-up timed out or ``stop`` was set."""
        deadline = time.monotonic() + _START_TIMEOUT
        while not stop.is_set():
            if all(self.ready[i].is_set() for i in indexes):
                return True
            for i in indexes:
                code = self.procs[i].exitcode
                if code is not None:
                    _log.error("worker_failed_to_start", worker=i, exit_code=code)
                    return False
            if time.monotonic() > deadline:
                _log.error("worker_start_timeout", seconds=_START_TIMEOUT)
                return False
            await asyncio.sleep(_POLL)
        return False

    async def stop_all(self, grace: float) -> None:
        """SIGTERM every live worker, wait up to ``grace`` seconds, then SIGKILL stragglers."""
        for proc in self.procs.values():
            if proc.exitcode is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        # a process exit is no asyncio event: poll the exit codes
        while any(p.exitcode is None for p in self.procs.values()) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_POLL)
        for i, proc in self.procs.items():
            if proc.exitcode is None:
                _log.warning("worker_killed", worker=i, pid=proc.pid)
                proc.kill()
            proc.join(timeout=5)
            metrics.mark_process_dead(proc.pid)


def _metrics_dir() -> str | None:
    """A fresh directory for the workers' metric files (prometheus-client multiprocess mode), set as
    ``PROMETHEUS_MULTIPROC_DIR`` for the workers to inherit; None when the environment names one
    already (the operator's, emptied of a previous run's files here)."""
    given = os.environ.get(metrics.MULTIPROC_ENV)
    if given:
        for name in os.listdir(given):
            if name.endswith(".db"):
                os.unlink(os.path.join(given, name))
        return None
    path = tempfile.mkdtemp(prefix="ucpgw-metrics-")
    os.environ[metrics.MULTIPROC_ENV] = path
    return path


def _drop_metrics_dir(path: str | None) -> None:
    if path is not None:
        os.environ.pop(metrics.MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


async def _prepare(settings: Settings) -> tuple[Settings, Any]:
    """Create the development secrets once and open the database once (embedded start and
    migrations). Returns ``(settings for the workers, embedded server or None)``."""
    from .db.database import connect_database
    from .keys.web import load_ring
    from .verbs.secret import load_nonce_secrets

    load_ring(settings)  # dev: generates keys/dev.kek here, not racily in N workers
    load_nonce_secrets(settings)  # dev: generates <data_dir>/verbs-nonce.secret likewise
    db = await connect_database(settings)
    await db._stop_supervising()  # the supervisor supervises it from here on (supervise)
    embedded, db.embedded = db.embedded, None  # keep the embedded server running for the workers
    try:
        async with db.pool.acquire() as conn:
            limit = int(await conn.fetchval("SELECT current_setting('max_connections')"))
    finally:
        await db.close()
    pool = settings.db_pool_size  # each worker's, resolved here: the workers' settings say workers=1
    need = settings.workers * pool + _SPARE_CONNECTIONS
    if need > limit:
        if embedded is not None:
            from .db.embedded import stop_embedded

            await stop_embedded(embedded)
        raise ConfigError(
            f"{settings.workers} workers x db_pool_max {pool} connections (+{_SPARE_CONNECTIONS} "
            f"spare) exceed PostgreSQL's max_connections {limit}; lower UCPGW_WORKERS or UCPGW_DB_POOL_MAX"
        )
    # the workers' metrics are served by the supervisor's listener (one scrape, every worker)
    update: dict[str, Any] = {"workers": 1, "db_pool_max": pool, "metrics_port": None}
    if embedded is not None:
        update["database_url"] = db.owner_dsn
    return settings.model_copy(update=update), embedded


async def supervise(settings: Settings) -> int:
    """Run ``settings.workers`` gateway processes on one port until SIGINT/SIGTERM.

    Returns the exit code: 0 after a signal, 1 when a worker failed to start or kept crashing.
    Raises: ConfigError before any worker is started (port taken, database, too many connections).
    """
    from .serve import bind_socket

    sock = bind_socket(settings.host, settings.port)  # the one listening socket every worker accepts on
    embedded = metrics_runner = None
    metrics_dir = _metrics_dir()  # before any worker starts: each writes its samples there
    stop = asyncio.Event()

    def on_signal() -> None:
        sock.close()  # at once: only the workers' copies keep the port listening now (module docstring)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    code = 0
    watch: asyncio.Task | None = None
    try:
        worker_settings, embedded = await _prepare(settings)
        if embedded is not None:  # restarted when it dies; the workers' pools reconnect
            from .db.embedded import supervise_embedded

            watch = asyncio.create_task(supervise_embedded(embedded), name="ucpgw-embedded-pg")
        worker_settings = worker_settings.model_copy(update={"port": sock.getsockname()[1]})
        if settings.metrics_port is not None:
            from .serve import start_metrics

            metrics_runner = await start_metrics(settings)
        workers = _Workers(worker_settings, sock)
        try:
            code = await _run(workers, settings.workers, settings.demo, stop)
        finally:
            await workers.stop_all(settings.shutdown_timeout + 5)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        sock.close()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        _drop_metrics_dir(metrics_dir)
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if embedded is not None:
            from .db.embedded import stop_embedded

            await stop_embedded(embedded)
    _log.info("stopped", exit_code=code)  # not reached when start-up raised (the CLI prints it, exit 1)
    return code


async def _run(workers: _Workers, n: int, demo: bool, stop: asyncio.Event) -> int:
    workers.start(0, seed=demo)
    if not await workers.wait_ready([0], stop):
        return 0 if stop.is_set() else 1
    for i in range(1, n):
        workers.start(i)
    if not await workers.wait_ready(list(range(n)), stop):
        return 0 if stop.is_set() else 1
    host, port = workers.settings.host, workers.settings.port
    _log.info("listening", url=f"http://{host}:{port}", workers=n)
    budget = RestartBudget()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except TimeoutError:
            pass
        for i, proc in list(workers.procs.items()):
            if proc.exitcode is None or stop.is_set():
                continue
            _log.error("worker_exited", worker=i, pid=proc.pid, exit_code=proc.exitcode)
            metrics.mark_process_dead(proc.pid)  # its live gauges go; its counters stay in the sums
            if not budget.allow(time.monotonic()):
                _log.error("workers_keep_crashing", restarts=budget.limit, window_seconds=budget.window)
                return 1
            proc.join(timeout=1)
            workers.start(i)
    return 0

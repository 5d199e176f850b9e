"""Run the gateway: bind first, then open the database, serve until SIGINT/SIGTERM, shut down cleanly.

Shutdown order (aiohttp web_advanced "Graceful shutdown"): stop accepting, let in-flight requests
finish (up to ``shutdown_timeout`` seconds), run cleanup contexts in reverse (workers, pool), and stop
the embedded PostgreSQL last, so no postgres process outlives the gateway.

Stopping to accept (:func:`stop_accepting`) takes the connections the kernel has already completed
(its accept queue) before the listening descriptor is closed, in one step with no await between, so
a client gets either an answer or "connection refused", not a reset of a connection it saw
established; the process whose close ends the listening socket (the last one, under ``--workers``)
has just emptied its queue. A connection accepted but whose first request has not arrived yet is
given up to ``FIRST_REQUEST_WAIT`` seconds to send it before the idle connections are closed
(aiohttp closes idle connections at once, and drops what arrives after that).

Front path: :func:`install_front` puts the foundation's front handler
(:func:`ucp_gateway.middleware.front_handler`) before aiohttp's router and middleware chain, so a
fresh cached public document (``/.well-known/ucp``) is answered without them; every other request
reaches the application exactly as before.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from . import metrics
from .access.mtls import server_ssl_context
from .app import create_app
from .config import Settings
from .errors import ConfigError
from .middleware import FOUNDATION, front_handler

__all__ = [
    "BACKLOG",
    "FIRST_REQUEST_WAIT",
    "bind_socket",
    "demo_seed_hook",
    "install_front",
    "loop_factory",
    "run",
    "run_server",
    "stop_accepting",
]

_log = structlog.get_logger("ucp_gateway.serve")

BACKLOG = 1024  # the kernel's accept queue (listen(2)); the serving loop re-applies it
FIRST_REQUEST_WAIT = 1.0  # seconds a fresh connection may take to send its request once stopping


def bind_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """Bind and listen on ``host:port``; port 0 picks a free one.

    ``reuse_port``: set SO_REUSEPORT first, so that several processes can listen on the same port and
    the kernel spreads new connections over them (Linux socket(7); bench/checkout_flow.py --workers).
    Raises: ConfigError when the port is taken (by a socket without SO_REUSEPORT) or unusable.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve listen host {host!r}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(addr)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48):  # EADDRINUSE (Linux, BSD)
            raise ConfigError(f"port {port} on {host} is already in use") from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


def loop_factory(settings: Settings) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop constructor for serving: uvloop's (libuv; about a tenth less gateway CPU per
    request than asyncio's selector loop) when ``settings.event_loop`` is ``auto`` and uvloop is
    installed, or ``uvloop``; None means asyncio's default loop.

    Raises: ConfigError when ``event_loop`` is ``uvloop`` and uvloop cannot be imported.
    """
    if settings.event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if settings.event_loop == "uvloop":
            raise ConfigError("event_loop is uvloop but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


def run(settings: Settings, main: Any) -> Any:
    """Run the coroutine ``main`` to completion on the serving event loop (:func:`loop_factory`);
    returns its result. ``asyncio.run`` semantics (a fresh loop, async generators shut down)."""
    with asyncio.Runner(loop_factory=loop_factory(settings)) as runner:
        return runner.run(main)


def demo_seed_hook(settings: Settings) -> Callable[[web.Application], Awaitable[None]] | None:
    """The ``before_serve`` of ``serve --demo``: seed the flower-shop company (idempotent) and say so
    on stderr when it was created. None when ``settings.demo`` is off."""
    if not settings.demo:
        return None

    async def seed(app: web.Application) -> None:
        from .appkeys import DATABASE
        from .demo import seed_demo

        report = await seed_demo(app[DATABASE], settings)
        if report.created:
            print(f"seeded demo company {report.company.slug!r}", file=sys.stderr)

    return seed


_ROUTED_BY_PATH = (web.PlainResource, web.DynamicResource, web.StaticResource)


def install_front(runner: web.AppRunner) -> bool:
    """Put :func:`~ucp_gateway.middleware.front_handler` in front of the app's own request handler.

    Call it after ``runner.setup()`` and before any site starts: aiohttp's ``web.Server`` keeps the
    handler in its public ``request_handler`` attribute, and each connection's ``RequestHandler``
    copies it when the connection is made (aiohttp 3.14 ``web_protocol``;
    tests/discovery/test_front_path.py fails if a release stops doing so). Nothing else is changed.

    Returns True when installed; False, changing nothing (the foundation layer's fast path still
    answers), when the front could not answer exactly what the app would: the runner has no server,
    the server's handler is not the app's own, the app has no foundation state or its first
    middleware is not the foundation layer (an outer middleware would be skipped), it has
    ``on_response_prepare`` receivers (the front's answers have no route, so they would not run), or a
    resource that is not resolved by method and path alone (sub-apps, domains, custom resources:
    what the foundation learnt for one request would not hold for the next).
    """
    app, server = runner.app, runner.server
    if server is None or not isinstance(app, web.Application) or FOUNDATION not in app:
        return False
    state = app[FOUNDATION]
    handle = server.request_handler
    if getattr(handle, "__self__", None) is not app or state.middleware is None:
        return False
    if not app.middlewares or app.middlewares[0] is not state.middleware or app.on_response_prepare:
        return False
    if any(type(resource) not in _ROUTED_BY_PATH for resource in app.router.resources()):
        return False
    server.request_handler = front_handler(state, handle)
    return True


def _take_queue(sock: socket.socket) -> list[socket.socket]:
    """Accept, without blocking, the connections the kernel has queued on ``sock`` (at most
    twice the backlog, so a flood cannot hold the stop)."""
    taken = []
    for _ in range(2 * BACKLOG):
        try:
            conn, _ = sock.accept()
        except (BlockingIOError, InterruptedError):  # the queue is empty
            break
        except ConnectionAbortedError:  # that client gave up while queued
            continue
        except OSError:  # not listening any more
            break
        taken.append(conn)
    return taken


def _awaiting_first_request(handler: Any) -> bool:
    # aiohttp counts the requests parsed on a connection in RequestHandler._request_count (3.14;
    # tests/test_serve.py fails if a release drops it); without it, nothing is waited for
    return handler.transport is not None and getattr(handler, "_request_count", 1) == 0


async def stop_accepting(server: asyncio.AbstractServer, sock: socket.socket, http: web.Server, *, wait: float) -> int:
    """Stop accepting on ``sock`` without dropping a connection the kernel has already completed.

    Takes the kernel's accept queue and closes ``server`` (asyncio and uvloop close the listening
    descriptor at once) with no await in between; the connections taken are served by ``http``
    like any accepted one. Then waits until every open connection has sent its first request, at
    most ``wait`` seconds, so that the idle-connection close of aiohttp's shutdown does not drop a
    request already on its way. A listening socket shared by several processes (``--workers``)
    stops listening when the last of them closes its descriptor, having emptied the queue first.

    Returns the number of connections taken from the queue.
    """
    loop = asyncio.get_running_loop()
    taken = _take_queue(sock)
    server.close()
    for conn in taken:
        conn.setblocking(False)
        try:
            await loop.connect_accepted_socket(http, conn)
        except OSError:  # reset by the client meanwhile
            conn.close()
    deadline = loop.time() + wait
    while True:
        await asyncio.sleep(0.005)  # at least once: the loop's own last accepts become connections
        if loop.time() >= deadline or not any(_awaiting_first_request(h) for h in http.connections):
            return len(taken)


async def start_metrics(settings: Settings) -> web.AppRunner:
    """The Prometheus listener on ``metrics_host:metrics_port`` (ucp_gateway.metrics).

    Raises: ConfigError when the address cannot be bound."""
    try:
        return await metrics.start_listener(settings.metrics_host, settings.metrics_port or 0)
    except OSError as exc:
        raise ConfigError(
            f"cannot listen for metrics on {settings.metrics_host}:{settings.metrics_port}: {exc.strerror}"
        ) from None


async def run_server(
    settings: Settings,
    *,
    before_serve: Callable[[web.Application], object] | None = None,
    stop: asyncio.Event | None = None,
    reuse_port: bool = False,
    sock: socket.socket | None = None,
    front: bool = True,
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> None:
    """Serve ``create_app(settings)`` until a signal (or ``stop``) arrives.

    Args:
        before_serve: optional ``async (app) -> None`` run after the database is open and before the
            socket accepts connections (``serve --demo`` seeds here).
        stop: an event that ends serving when set (tests); SIGINT/SIGTERM set it too.
        reuse_port: listen with SO_REUSEPORT (several processes bind the port; bench/checkout_flow.py).
        sock: a listening socket to serve on instead of binding ``settings.host:port`` (a worker of
            ``serve --workers N`` gets the supervisor's, ucp_gateway.workers); closed on return.
        signals: the signals that set ``stop`` (a worker leaves SIGINT to its supervisor).
    TLS: with ``settings.tls_cert`` the socket serves HTTPS, and with ``client_ca`` asks for client
    certificates (``access.mtls.server_ssl_context``).
    Raises: ConfigError (port in use, database problems, unusable TLS files) before anything is served.
    """
    tls = server_ssl_context(settings)  # HTTPS (and mTLS) when the gateway terminates TLS itself
    if sock is None:
        sock = bind_socket(settings.host, settings.port, reuse_port=reuse_port)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in signals:
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass
    app = create_app(settings)
    # keepalive_timeout also bounds a connection whose request line and headers are still arriving
    # (aiohttp arms it when the connection opens): no client holds a socket for an hour that way
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=settings.shutdown_timeout,
        keepalive_timeout=settings.http_keepalive_timeout,
        handle_signals=False,
    )
    server: asyncio.AbstractServer | None = None
    metrics_runner: web.AppRunner | None = None
    try:
        await runner.setup()  # opens the database (cleanup_ctx) and starts workers
        if settings.metrics_port is not None:  # one process: its own registry (workers: the supervisor's)
            metrics_runner = await start_metrics(settings)
        if before_serve is not None:
            await before_serve(app)  # type: ignore[misc]
        if front and not install_front(runner):
            _log.warning("front_path_off", reason="the app cannot be fronted; the foundation layer answers")
        # the long-lived startup objects (modules, models, schemas, the app: ~100k here) go to the
        # permanent generation, so that a full collection under load traverses only what requests
        # left behind (one took 110 ms of CPU, stalling every request in flight, before this)
        gc.collect()
        gc.freeze()
        assert runner.server is not None  # set up above
        host, port = sock.getsockname()[:2]
        # the asyncio server itself (not an aiohttp site), so that stop_accepting can close it
        # synchronously right after taking the accept queue
        server = await loop.create_server(runner.server, sock=sock, backlog=BACKLOG, ssl=tls)
        scheme = "https" if tls is not None else "http"
        _log.info("listening", url=f"{scheme}://{host}:{port}", embedded_db=settings.database_url is None)
        await stop.wait()
        _log.info("shutting_down")
        wait = min(FIRST_REQUEST_WAIT, settings.shutdown_timeout)
        queued = await stop_accepting(server, sock, runner.server, wait=wait)
        _log.info("stopped_accepting", queued=queued)
    finally:
        gc.unfreeze()  # collectable again (a process that serves more than once, as tests do)
        if server is not None:
            server.close()  # no-op after stop_accepting
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        await runner.cleanup()
        sock.close()
        for sig in signals:
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                pass
        _log.info("stopped")

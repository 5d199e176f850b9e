"""The application factory: ``create_app(settings)`` -> ``aiohttp.web.Application``.

Shape (docs/architecture.md): the foundation installs its one middleware (request id, errors,
tenancy) and the health routes; every subsystem then adds its own routes, middlewares and background tasks
through one ``setup(app)`` function listed in :data:`COMPONENTS`, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import structlog
from aiohttp import web

from .appkeys import CLOCK, DATABASE, SETTINGS
from .clock import Clock, SystemClock
from .commerce import web as commerce_web
from .config import Settings
from .db import Database
from .db.database import connect_database
from .discovery.web import setup as discovery_setup
from .hostcache import HostCache
from .mediatype import json_response
from .middleware import (
    ACCESS_LOG,
    ACCESS_LOG_ON,
    FOUNDATION,
    HOST_CACHE,
    PATH_WRAPPERS,
    PUBLIC_FAST_PATHS,
    Foundation,
    foundation_middleware,
    json_error,
)
from .monitor import setup as monitor_setup
from .transports.web import setup as transports_setup
from .verbs.web import setup as verbs_setup

__all__ = ["COMPONENTS", "create_app"]


# Each entry adds one subsystem to the app (routes, middlewares, cleanup_ctx). Order matters for
# middlewares: later entries run closer to the handler.
def _httpsig_setup(app: web.Application) -> None:
    from .httpsig import setup
    from .httpsig.admin_web import add_routes

    setup(app)
    add_routes(app)  # its admin API, here so that httpsig.web need not import keys.web's admin_route


def _access_setup(app: web.Application) -> None:
    from .access.web import setup

    setup(app)


def _keys_setup(app: web.Application) -> None:
    from .keys.web import setup

    setup(app)


def _agent_graph_setup(app: web.Application) -> None:
    from .discovery.subagents import registry_subagent_provider
    from .discovery.web import SUBAGENT_PROVIDER
    from .verbs.manifest import listed
    from .verbs.web import VERBS

    registry = app[VERBS].registry
    # the manifest's ?surface=ucp&subagent= selection, so verb_count matches the linked manifest
    app[SUBAGENT_PROVIDER] = registry_subagent_provider(lambda name: listed(registry, surface="ucp", subagent=name))


async def _retention_ctx(app: web.Application) -> AsyncIterator[None]:
    from .retention import run_forever

    s = app[SETTINGS]
    task = None
    if s.retention_interval > 0:
        task = asyncio.create_task(
            run_forever(
                app[DATABASE].pool,
                now=(app.get(CLOCK) or SystemClock()).now,
                interval=s.retention_interval,
                margin=s.retention_margin,
                batch=s.retention_batch,
            ),
            name="ucpgw-retention",
        )
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _retention_setup(app: web.Application) -> None:
    app.cleanup_ctx.append(_retention_ctx)


COMPONENTS: list[Callable[[web.Application], None]] = [
    _keys_setup,  # KEK vault, key scheduler, /admin/v1/keys, /admin/v1/admin-tokens
    discovery_setup,  # /.well-known/ucp, agent graph, vendor documents, fetcher, trust middleware
    _httpsig_setup,  # RFC 9421 verification middleware + response signing, /admin/v1/blocks, /admin/v1/signatures/debug
    _access_setup,  # the other platform proofs, signature policy log counters, /admin/v1/access (docs/access.md)
    verbs_setup,  # /api/v1/agent/verbs, /api/v1/agent/dispatch, app[VERBS] (registry + dispatcher)
    _agent_graph_setup,  # sub-agent capability configs in /.well-known/ucp from the verb registry
    commerce_web.setup,  # UCP shopping REST binding (verbs checkout.*, orders.get), webhook worker
    transports_setup,  # /ucp/mcp (UCP MCP binding), /api/v1/webmcp/*; after verbs and commerce
    monitor_setup,  # database gauges and the SLO counts' flush (docs/operations.md, Metrics)
    _retention_setup,  # the sweeper of expired idempotency records, spent nonces, expired sessions
]


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process answers. Never touches the database."""
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: the database answers and every migration is applied (else 503)."""
    ok, reason = await request.app[DATABASE].ready()
    if not ok:
        return json_error(503, "not_ready", reason, {"Retry-After": "1"})
    return json_response({"status": "ready"})


def create_app(
    settings: Settings,
    *,
    clock: Clock | None = None,
    database: Database | None = None,
) -> web.Application:
    """Build the gateway application.

    Args:
        settings: the validated settings.
        clock: time source (default :class:`SystemClock`); tests pass a ``FrozenClock``.
        database: an already opened database (tests); when None the app opens one at startup
            (embedded or ``DATABASE_URL``) and closes it, and the embedded server, at cleanup.
    Returns: the application; nothing touches the network until it is started.
    """
    access_log = structlog.get_logger("ucp_gateway.http").bind()
    state = Foundation(
        host_cache=HostCache(
            # a Host asked for its documents only is read as often as they are rendered
            ttl=settings.host_cache_ttl,
            known_ttl=settings.profile_render_ttl,
        ),
        access_log=access_log,
        # filtering loggers know their level: when info is filtered out, skip the access-log work entirely
        log_on=getattr(access_log, "is_enabled_for", lambda level: True)(logging.INFO),
        wrappers={},  # path -> wrapper around the foundation layer (transports: /ucp/mcp)
        fast_paths={},  # path -> cached public answer before subsystem middlewares (discovery)
        metrics_on=settings.metrics_enabled,
    )
    app = web.Application(
        # the foundation layer also sets Server (no on_response_prepare receiver: every response would pay)
        middlewares=[foundation_middleware(state)],
        client_max_size=settings.client_max_size,
        # Content-Digest (RFC 9530) covers the body as transferred: never decode before verifying.
        handler_args={"auto_decompress": False},
    )
    app[SETTINGS] = settings
    app[CLOCK] = clock or SystemClock()
    app[FOUNDATION] = state  # the middleware's state; the keys below name the same objects
    app[HOST_CACHE] = state.host_cache
    app[ACCESS_LOG] = access_log
    app[ACCESS_LOG_ON] = state.log_on
    app[PATH_WRAPPERS] = state.wrappers
    app[PUBLIC_FAST_PATHS] = state.fast_paths
    if database is not None:
        app[DATABASE] = database
    else:
        app.cleanup_ctx.append(_database_ctx)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    for setup in COMPONENTS:
        setup(app)
    return app


async def _database_ctx(app: web.Application) -> AsyncIterator[None]:
    db = await connect_database(app[SETTINGS])
    app[DATABASE] = db
    try:
        yield
    finally:
        await db.close()

"""Order-webhook delivery worker (UCP order.md "Events"): outbox -> signed POST, at least once.

Rows are written by the order's own transaction (:func:`.repo.insert_outbox`); this worker finds due
events in ``webhook_queue``, leases one (moves its due time past the attempt), then, inside the
company's tenant context, resolves the target (the platform profile's
``capabilities["dev.ucp.shopping.order"][].config.webhook_url``), signs the exact stored body with the
company's active key (RFC 9421 via ``httpsig.sign_webhook_request``) and POSTs it with the
same ``Webhook-Id`` / ``Webhook-Timestamp`` on every retry. 2xx -> delivered; otherwise retried with
exponential backoff (base * 2**(n-1), capped) up to ``webhook_max_attempts``. A crash between
commit and delivery loses nothing: the queue row stays due. A delivery failure never touches the API.

Targets are outbound requests under discovery's SSRF guard (``discovery.ssrf``, the policy of profile
fetches): before each attempt the URL must pass ``check_target`` (https, or http for a dev allowlisted
host in development; no credentials; an IP literal must be globally routable, loopback only for an
allowlisted host), and the POST goes through ``guarded_session`` (every named host resolved and
checked for the connection, no DNS cache, no proxy from the environment, no redirects followed).
A refused target (by the URL check, or its host resolving to a special-use address at connect
time) is a permanent failure of that event: ``last_error`` says why, no retry, a warning is logged
(never the URL, which may carry a token). Rows written before the check are judged the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

import aiohttp
import asyncpg
from aiohttp import web

from ..appkeys import CLOCK, DATABASE, SETTINGS
from ..clock import Clock
from ..config import Settings
from ..db import platform_scan_tx, tenant_tx
from ..discovery.fetcher import ProfileFetcher
from ..discovery.ssrf import BlockedAddress, HostResolver, RefusedUrl, check_target, dev_allowlist, guarded_session
from ..discovery.web import PROFILE_FETCHER
from ..errors import GatewayError
from ..httpsig import sign_webhook_request
from ..logs import get_logger
from ..tenancy import get_company, public_origin
from .context import caller_profile_url, webhooks_for

__all__ = [
    "WEBHOOK_SIGNER",
    "WEBHOOK_TARGETS",
    "WebhookSigner",
    "WebhookWorker",
    "backoff",
    "webhook_worker_ctx",
]

log = logging.getLogger("ucp_gateway.commerce.webhooks")
_log = get_logger("ucp_gateway.commerce.webhooks")
#: Bytes of a receiver's response body read at most (its status decides; the rest is dropped).
_RESPONSE_READ = 64 * 1024


class WebhookSigner(Protocol):
    async def __call__(
        self,
        pool: Any,
        company_id: uuid.UUID,
        *,
        url: str,
        body: bytes,
        ucp_agent: str,
        webhook_id: str,
        webhook_timestamp: str,
        now: datetime,
    ) -> dict[str, str]: ...


TargetResolver = Callable[[str], Awaitable[str | None]]
WEBHOOK_SIGNER = web.AppKey("ucpgw.webhook_signer", WebhookSigner)  # type: ignore[type-abstract]
WEBHOOK_TARGETS = web.AppKey("ucpgw.webhook_targets", TargetResolver)  # type: ignore[arg-type]
_WORKER = web.AppKey("ucpgw.webhook_worker", object)


def backoff(attempt: int, base: float, cap: float) -> float:
    """Seconds before retry number ``attempt`` (1-based): ``base * 2**(attempt-1)``, at most ``cap``."""
    return min(cap, base * (2 ** max(0, attempt - 1)))


def webhook_url_from_profile(profile: Any) -> str | None:
    """``capabilities["dev.ucp.shopping.order"][].config.webhook_url`` of a platform profile (a JSON
    document as fetched, any shape: None when it has no such string). Not checked: see the worker."""
    if not isinstance(profile, dict):
        return None
    ucp = profile.get("ucp") or profile
    caps = (ucp.get("capabilities") if isinstance(ucp, dict) else None) or {}
    if isinstance(caps, list):  # the 2026-01 profile form: a list of {name, version, config}
        entries = [c for c in caps if isinstance(c, dict) and c.get("name") == "dev.ucp.shopping.order"]
    elif isinstance(caps, dict):
        entries = caps.get("dev.ucp.shopping.order") or []
    else:
        return None
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list):
        return None
    for e in entries:
        config = e.get("config") if isinstance(e, dict) else None
        url = config.get("webhook_url") if isinstance(config, dict) else None
        if isinstance(url, str) and url:
            return url
    return None


class _Refused(Exception):
    """The target's host resolved to a special-use address at connect time (permanent)."""


class WebhookWorker:
    """Delivers due outbox events. ``run_once()`` is one scan (tests and the loop use it).

    Args:
        pool, settings, clock: the gateway's (``settings``: the ``webhook_*`` fields and the dev
            allowlist, ``dev_profile_hosts``, honoured in development only).
        signer: signs each POST (:class:`WebhookSigner`).
        resolve_target: ``async (caller profile URL) -> webhook_url | None`` for rows stored without a
            target (:func:`profile_target_resolver`); a GatewayError it raises is a retried failure.
        resolver: name-resolution seam of the guarded session ``async (host, port) -> [ip]``
            (default: the OS resolver). The worker owns its session; ``await worker.close()`` ends it.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        clock: Clock,
        *,
        signer: WebhookSigner,
        resolve_target: TargetResolver,
        resolver: HostResolver | None = None,
        batch: int = 20,
    ):
        self.pool, self.settings, self.clock = pool, settings, clock
        self.signer, self.resolve_target, self.batch = signer, resolve_target, batch
        self._dev_hosts = dev_allowlist(settings)
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = guarded_session(dev_hosts=self._dev_hosts, resolver=self._resolver, auto_decompress=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _lease(self) -> list[tuple[uuid.UUID, uuid.UUID]]:
        now = self.clock.now()
        lease = now + timedelta(seconds=self.settings.webhook_timeout * 3)
        async with platform_scan_tx(self.pool, "webhook_queue") as conn:
            rows = await conn.fetch(
                "UPDATE webhook_queue q SET next_attempt_at = $2 FROM ("
                " SELECT company_id, event_id FROM webhook_queue WHERE next_attempt_at <= $1"
                " ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED) d"
                " WHERE q.company_id = d.company_id AND q.event_id = d.event_id"
                " RETURNING q.company_id, q.event_id",
                now,
                lease,
                self.batch,
            )
        return [(r["company_id"], r["event_id"]) for r in rows]

    async def run_once(self) -> int:
        """Attempt every due event once. Returns how many were delivered."""
        delivered = 0
        for company_id, event_id in await self._lease():
            try:
                delivered += await self._deliver(company_id, event_id)
            except Exception:  # one bad event must not stop the others
                log.exception("webhook delivery crashed", extra={"webhook_id": str(event_id)})
        return delivered

    async def _deliver(self, company_id: uuid.UUID, event_id: uuid.UUID) -> int:
        async with tenant_tx(self.pool, company_id) as conn:
            row = await conn.fetchrow("SELECT * FROM webhook_outbox WHERE id = $1", event_id)
        if row is None or row["delivered_at"] is not None:
            await self._dequeue(company_id, event_id)
            return 0
        error: str | None = None
        refused = False
        target = row["target_url"]
        if not webhooks_for(row["caller"], self.settings.dev_mode):
            # an order of an unsigned caller: its claimed platform must not get signed events of
            # orders it may never have placed (and a row queued before that rule is judged alike)
            error, refused, target = "target refused: the order's caller is unverified", True, None
        elif not target:
            try:
                target = await self.resolve_target(caller_profile_url(row["caller"]))
            except GatewayError as exc:
                error = f"platform profile: {exc.message}"[:500]
        if error is None and not target:
            error = "platform profile declares no order webhook_url"
        elif error is None:
            try:
                check_target(target, dev_hosts=self._dev_hosts, what="webhook")
                error = await self._post(company_id, row, target)
            except (RefusedUrl, _Refused) as exc:
                error, refused = f"target refused: {exc}", True
                _log.warning(
                    "webhook_target_refused",
                    company_id=str(company_id),
                    webhook_id=str(event_id),
                    caller=row["caller"],
                    reason=str(exc),
                )
        if refused:
            target = row["target_url"]  # a refused URL is never stored (simulate_shipping copies it)
        now = self.clock.now()
        attempts = row["attempts"] + 1
        async with tenant_tx(self.pool, company_id) as conn:
            if error is None:
                await conn.execute(
                    "UPDATE webhook_outbox SET attempts = $2, delivered_at = $3, target_url = $4,"
                    " last_error = NULL WHERE id = $1",
                    event_id,
                    attempts,
                    now,
                    target,
                )
            else:
                nxt = now + timedelta(
                    seconds=backoff(attempts, self.settings.webhook_backoff_base, self.settings.webhook_backoff_max)
                )
                await conn.execute(
                    "UPDATE webhook_outbox SET attempts = $2, next_attempt_at = $3, target_url = $4,"
                    " last_error = $5 WHERE id = $1",
                    event_id,
                    attempts,
                    nxt,
                    target,
                    error[:500],
                )
        if error is None or refused or attempts >= self.settings.webhook_max_attempts:
            await self._dequeue(company_id, event_id)
        else:
            async with platform_scan_tx(self.pool, "webhook_queue") as pconn:
                await pconn.execute(
                    "UPDATE webhook_queue SET next_attempt_at = $3 WHERE company_id = $1 AND event_id = $2",
                    company_id,
                    event_id,
                    nxt,
                )
        return 1 if error is None else 0

    async def _dequeue(self, company_id: uuid.UUID, event_id: uuid.UUID) -> None:
        async with platform_scan_tx(self.pool, "webhook_queue") as conn:
            await conn.execute(
                "DELETE FROM webhook_queue WHERE company_id = $1 AND event_id = $2", company_id, event_id
            )

    async def _post(self, company_id: uuid.UUID, row: asyncpg.Record, target: str) -> str | None:
        """One signed POST to ``target`` (already checked): None when delivered, else why not.
        Raises _Refused when the host resolves to a special-use address."""
        company = await get_company(self.pool, str(company_id))
        host = company.hostnames[0] if company.hostnames else "localhost"
        ucp_agent = (
            f'profile="{public_origin(self.settings.public_scheme, host, self.settings.public_port)}/.well-known/ucp"'
        )
        body = bytes(row["payload"])
        try:
            headers = await self.signer(
                self.pool,
                company_id,
                url=target,
                body=body,
                ucp_agent=ucp_agent,
                webhook_id=str(row["id"]),
                webhook_timestamp=str(int(row["created_at"].timestamp())),
                now=self.clock.now(),
            )
        except Exception as exc:  # no active key etc.: retry later, never send unsigned
            return f"signing failed: {exc.__class__.__name__}"
        try:
            timeout = aiohttp.ClientTimeout(total=self.settings.webhook_timeout)
            async with self._session_for_loop().post(
                target, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as resp:
                # only the status counts: a little of the body is read so the connection may be
                # reused, never all of it (a receiver could stream without end until the timeout)
                await resp.content.read(_RESPONSE_READ)
                return None if 200 <= resp.status < 300 else f"HTTP {resp.status}"
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, BlockedAddress):
                raise _Refused("webhook host resolves to a special-use address") from None
            return f"{exc.__class__.__name__}: {exc}"[:500]
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return f"{exc.__class__.__name__}: {exc}"[:500]

    async def run_forever(self) -> None:
        while True:
            try:
                await self.run_once()
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                log.warning("webhook scan failed; retrying")
            await asyncio.sleep(self.settings.webhook_poll_interval)


def profile_target_resolver(fetcher: ProfileFetcher) -> TargetResolver:
    """Target of a row stored without one (conformance mode, or no acceptable webhook_url when the
    order was written): the order ``webhook_url`` of the caller's platform profile, fetched now by
    discovery's fetcher (``ProfileFetcher.fetch_document``: URL policy, SSRF guard, no redirects,
    size and time bounds; no schema, since conformance profiles are 2026-01 documents). The worker
    checks the URL it returns. Raises the fetcher's GatewayErrors (the worker retries)."""

    async def resolve(profile_url: str) -> str | None:
        return webhook_url_from_profile(await fetcher.fetch_document(profile_url))

    return resolve


async def _default_signer(pool: Any, company_id: uuid.UUID, **kw: Any) -> dict[str, str]:
    return await sign_webhook_request(pool, company_id, **kw)


async def webhook_worker_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: run the delivery worker for the app's lifetime (targets of rows stored without one
    are read through discovery's profile fetcher, ``app[PROFILE_FETCHER]``, else one of its own)."""
    settings = app[SETTINGS]
    fetcher = app.get(PROFILE_FETCHER)
    own = None
    if fetcher is None:
        fetcher = own = ProfileFetcher(settings, clock=app[CLOCK])
    worker = WebhookWorker(
        app[DATABASE].pool,
        settings,
        app[CLOCK],
        signer=app.get(WEBHOOK_SIGNER) or _default_signer,
        resolve_target=app.get(WEBHOOK_TARGETS) or profile_target_resolver(fetcher),
    )
    task = asyncio.create_task(worker.run_forever(), name="ucpgw-webhooks")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await worker.close()
        if own is not None:
            await own.close()

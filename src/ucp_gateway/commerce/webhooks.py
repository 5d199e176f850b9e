"""Order-webhook delivery worker (UCP order.md "Events"): outbox -> signed POST, at least once.

Rows are written by the order's own transaction (:func:`.repo.insert_outbox`); this worker leases
due events from ``webhook_queue`` fairly across receivers (``commerce.webhook_queue``: a bounded
number in flight per process and per receiver, a fenced lease that outlives the attempt), then,
concurrently and each inside the company's tenant context, resolves the target (the platform
profile's ``capabilities["dev.ucp.shopping.order"][].config.webhook_url``), signs the exact stored
body with the company's active key (RFC 9421 via ``httpsig.sign_webhook_request``) and POSTs it
with the same ``Webhook-Id`` / ``Webhook-Timestamp`` on every retry. 2xx -> delivered; otherwise
retried with exponential backoff and jitter (``webhook_queue.retry_delay``) until
``webhook_max_attempts`` attempts, then dead-lettered (``webhook_outbox.dead_at``; staff list and
requeue them: ``ucp-gateway webhooks dead|retry``). At least once: a crash between commit and
delivery loses nothing (the queue row stays due), and an event is sent twice only after a crash
between its POST and its record. A delivery failure never touches the API.

Targets are outbound requests under discovery's SSRF guard (``discovery.ssrf``, the policy of profile
fetches): before each attempt the URL must pass ``check_target`` (https, or http for a dev allowlisted
host in development; no credentials; an IP literal must be globally routable, loopback only for an
allowlisted host), and the POST goes through ``guarded_session`` (every named host resolved and
checked for the connection, no DNS cache, no proxy from the environment, no redirects followed).
A refused target (by the URL check, or its host resolving to a special-use address at connect
time) is a permanent failure of that event (dead-lettered): ``last_error`` says why, no retry, a warning is logged
(never the URL, which may carry a token). Rows written before the check are judged the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import aiohttp
import asyncpg
from aiohttp import web

from .. import metrics
from ..appkeys import CLOCK, DATABASE, SETTINGS
from ..clock import Clock
from ..config import Settings
from ..db import tenant_tx
from ..db.outage import is_outage
from ..discovery.fetcher import ProfileFetcher
from ..discovery.ssrf import BlockedAddress, HostResolver, RefusedUrl, check_target, dev_allowlist, guarded_session
from ..discovery.web import PROFILE_FETCHER
from ..errors import GatewayError
from ..httpsig import sign_webhook_request
from ..logs import get_logger
from ..tenancy import get_company, public_origin
from .context import caller_profile_url, webhooks_for
from .webhook_queue import dead_letter, delivered, dequeue, lease, renew, reschedule, retry_delay

__all__ = [
    "WEBHOOK_SIGNER",
    "WEBHOOK_TARGETS",
    "WEBHOOK_WORKER",
    "DeliveryStats",
    "WebhookSigner",
    "WebhookWorker",
    "backoff",
    "webhook_worker_ctx",
]

log = logging.getLogger("ucp_gateway.commerce.webhooks")
_log = get_logger("ucp_gateway.commerce.webhooks")
#: Bytes of a receiver's response body read at most (its status decides; the rest is dropped).
_RESPONSE_READ = 64 * 1024
_LEASE_MARGIN = 2.0  # seconds of lease kept beyond one attempt's timeout before a POST
_COALESCE = 0.01  # seconds to gather completions before leasing again
_STOP_GRACE = 3.0  # seconds a clean stop waits for deliveries in flight
_HOST_TTL = 30.0  # seconds a company's host name is reused for the UCP-Agent header


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
WEBHOOK_WORKER = web.AppKey("ucpgw.webhook_worker", object)  # the app's WebhookWorker (its .stats), when running


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


@dataclass
class DeliveryStats:
    """Counters of one worker since it started (metrics read them): ``delivered``; ``retried``
    (an attempt failed, another is scheduled); ``dead`` (dead-lettered: budget spent or target
    refused); ``lost_leases`` (a late worker's write that the fence refused); ``in_flight`` now."""

    delivered: int = 0
    retried: int = 0
    dead: int = 0
    lost_leases: int = 0
    in_flight: int = 0


class WebhookWorker:
    """Delivers due outbox events, concurrently and fairly (``commerce.webhook_queue``).

    At most ``settings.webhook_concurrency`` deliveries are in flight in this process, at most
    ``settings.webhook_receiver_concurrency`` of them to one receiver (the caller's platform), so a
    receiver that is slow or never answers holds only its own slots and events. ``run_forever``
    leases again as soon as slots free up (or every ``webhook_poll_interval`` seconds when idle);
    ``run_once()`` leases what is due now within those bounds and attempts each once (tests).

    Args:
        pool, settings, clock: the gateway's (``settings``: the ``webhook_*`` fields and the dev
            allowlist, ``dev_profile_hosts``, honoured in development only).
        signer: signs each POST (:class:`WebhookSigner`).
        resolve_target: ``async (caller profile URL) -> webhook_url | None`` for rows stored without a
            target (:func:`profile_target_resolver`); a GatewayError it raises is a retried failure.
        resolver: name-resolution seam of the guarded session ``async (host, port) -> [ip]``
            (default: the OS resolver). The worker owns its session; ``await worker.close()`` ends it.
        rand: ``() -> float`` in [0, 1), the retry jitter's source (tests pin it).
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
        rand: Callable[[], float] = random.random,
    ):
        self.pool, self.settings, self.clock = pool, settings, clock
        self.signer, self.resolve_target, self.rand = signer, resolve_target, rand
        self.concurrency = settings.webhook_concurrency
        self.per_receiver = settings.webhook_receiver_concurrency
        self.stats = DeliveryStats()
        self._dev_hosts = dev_allowlist(settings)
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._busy: dict[str, int] = {}  # receiver -> deliveries in flight in this process
        self._tasks: set[asyncio.Task] = set()
        self._freed = asyncio.Event()
        self._hosts: dict[uuid.UUID, tuple[float, str]] = {}  # company -> (expires, host name)

    def _session_for_loop(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = guarded_session(dev_hosts=self._dev_hosts, resolver=self._resolver, auto_decompress=False)
        return self._session

    async def close(self, grace: float = 0.0) -> None:
        """Let the deliveries in flight finish for up to ``grace`` seconds (a clean stop: an answered
        POST gets recorded, not sent again), cancel the rest (their leases expire: retried later) and
        end the session."""
        if self._tasks and grace > 0:
            await asyncio.wait(set(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _lease_seconds(self) -> float:
        return self.settings.webhook_timeout * 3  # one attempt's prepare + POST, with room to spare

    async def _fill(self) -> int:
        """Lease into the free slots and start one task per event. Returns how many started."""
        free = self.concurrency - len(self._tasks)
        if free <= 0:
            return 0
        now = self.clock.now()
        until = now + timedelta(seconds=self._lease_seconds())
        busy = {r: n for r, n in self._busy.items() if n > 0}
        leased = await lease(self.pool, now=now, until=until, limit=free, per_receiver=self.per_receiver, busy=busy)
        for company_id, event_id, receiver in leased:
            self._busy[receiver] = self._busy.get(receiver, 0) + 1
            task = asyncio.create_task(self._attempt(company_id, event_id, receiver, until))
            self._tasks.add(task)
            task.add_done_callback(lambda t, r=receiver: self._finished(t, r))
        self.stats.in_flight = len(self._tasks)
        return len(leased)

    def _finished(self, task: asyncio.Task, receiver: str) -> None:
        self._tasks.discard(task)
        left = self._busy.get(receiver, 1) - 1
        if left > 0:
            self._busy[receiver] = left
        else:
            self._busy.pop(receiver, None)
        self.stats.in_flight = len(self._tasks)
        self._freed.set()

    async def run_once(self) -> int:
        """Lease what is due now (within the bounds) and attempt each once. Returns how many were delivered."""
        before = self.stats.delivered
        await self._fill()
        while self._tasks:
            await asyncio.wait(set(self._tasks))
        return self.stats.delivered - before

    async def run_forever(self) -> None:
        """Deliver until cancelled. A database outage is logged once by the pool; other scan errors
        as a warning (never a traceback per poll)."""
        poll = self.settings.webhook_poll_interval
        while True:
            self._freed.clear()
            try:
                await self._fill()
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
                if not is_outage(exc):
                    log.warning("webhook scan failed (%s); retrying", exc.__class__.__name__)
            try:  # until a slot frees up (then lease again at once) or the next poll
                await asyncio.wait_for(self._freed.wait(), timeout=poll)
                await asyncio.sleep(_COALESCE)  # a few more completions, one lease for them all
            except TimeoutError:
                pass

    async def _attempt(self, company_id: uuid.UUID, event_id: uuid.UUID, receiver: str, held: datetime) -> None:
        try:
            await self._deliver(company_id, event_id, receiver, held)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one bad event must not stop the others; its lease expires: retried
            if is_outage(exc):  # the outage itself is on one line (db.outage)
                log.debug("webhook delivery interrupted by a database outage", extra={"webhook_id": str(event_id)})
            else:
                log.exception("webhook delivery crashed", extra={"webhook_id": str(event_id)})

    async def _deliver(self, company_id: uuid.UUID, event_id: uuid.UUID, receiver: str, held: datetime) -> None:
        async with tenant_tx(self.pool, company_id) as conn:
            row = await conn.fetchrow("SELECT * FROM webhook_outbox WHERE id = $1", event_id)
        if row is None or row["delivered_at"] is not None or row["dead_at"] is not None:
            await dequeue(self.pool, company_id, event_id)
            return
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
                held = await self._hold(company_id, event_id, held)
                if held is None:  # another worker has it now: it sends, not this one
                    self.stats.lost_leases += 1
                    return
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
        await self._record(company_id, event_id, row, held, target, error, refused)

    async def _hold(self, company_id: uuid.UUID, event_id: uuid.UUID, held: datetime) -> datetime | None:
        """The lease, renewed when less than one attempt (``webhook_timeout`` + margin) is left of it,
        so that it outlives the POST. None when it was lost (taken over after expiring)."""
        now = self.clock.now()
        if (held - now).total_seconds() >= self.settings.webhook_timeout + _LEASE_MARGIN:
            return held
        until = now + timedelta(seconds=self._lease_seconds())
        return until if await renew(self.pool, company_id, event_id, held, until) else None

    async def _record(self, company_id, event_id, row, held, target, error, refused) -> None:
        now = self.clock.now()
        attempts = row["attempts"] + 1
        if error is None:
            await delivered(self.pool, company_id, event_id, now=now, target=target)
            self.stats.delivered += 1
            metrics.WEBHOOK_DELIVERIES.labels("delivered").inc()
            return
        if refused or attempts >= self.settings.webhook_max_attempts:
            ok = await dead_letter(self.pool, company_id, event_id, held, now=now, error=error)
            if ok:
                self.stats.dead += 1
                metrics.WEBHOOK_DELIVERIES.labels("failed").inc()
                _log.warning(
                    "webhook_dead_lettered", company_id=str(company_id), webhook_id=str(event_id), attempts=attempts
                )
        else:
            s = self.settings
            wait = retry_delay(attempts, s.webhook_backoff_base, s.webhook_backoff_max, self.rand)
            due = now + timedelta(seconds=wait)
            ok = await reschedule(
                self.pool, company_id, event_id, held, due=due, receiver=row["caller"], now=now, error=error
            )
            self.stats.retried += ok
            metrics.WEBHOOK_DELIVERIES.labels("retry").inc()
        if not ok:
            self.stats.lost_leases += 1

    async def _host_of(self, company_id: uuid.UUID) -> str:
        """The company's first host name (its UCP-Agent profile URL), cached for ``_HOST_TTL`` s:
        one read per company and half-minute, not one per delivery."""
        hit = self._hosts.get(company_id)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        company = await get_company(self.pool, str(company_id))
        host = company.hostnames[0] if company.hostnames else "localhost"
        if len(self._hosts) > 10_000:
            self._hosts.clear()
        self._hosts[company_id] = (now + _HOST_TTL, host)
        return host

    async def _post(self, company_id: uuid.UUID, row: asyncpg.Record, target: str) -> str | None:
        """One signed POST to ``target`` (already checked): None when delivered, else why not.
        Raises _Refused when the host resolves to a special-use address."""
        host = await self._host_of(company_id)
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
    app[WEBHOOK_WORKER] = worker
    task = asyncio.create_task(worker.run_forever(), name="ucpgw-webhooks")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await worker.close(grace=min(settings.webhook_timeout, _STOP_GRACE))
        if own is not None:
            await own.close()

"""Order-webhook delivery worker (UCP order.md "Events"): outbox -> signed POST, at least once.

Rows are written by the order's own transaction (:func:`.repo.insert_outbox`); this worker finds due
events in ``webhook_queue``, leases one (moves its due time past the attempt), then, inside the
company's tenant context, resolves the target (the platform profile's
``capabilities["dev.ucp.shopping.order"][].config.webhook_url``), signs the exact stored body with the
company's active key (RFC 9421 via ``httpsig.sign_webhook_request``) and POSTs it with the
same ``Webhook-Id`` / ``Webhook-Timestamp`` on every retry. 2xx -> delivered; otherwise retried with
exponential backoff (base * 2**(n-1), capped) up to ``webhook_max_attempts``. A crash between
commit and delivery loses nothing: the queue row stays due. A delivery failure never touches the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
from ..tenancy import get_company, public_origin
from .context import caller_profile_url

__all__ = [
    "WEBHOOK_SIGNER",
    "WEBHOOK_TARGETS",
    "WebhookSigner",
    "WebhookWorker",
    "backoff",
    "webhook_worker_ctx",
]

log = logging.getLogger("ucp_gateway.commerce.webhooks")


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


def webhook_url_from_profile(profile: dict[str, Any]) -> str | None:
    """``capabilities["dev.ucp.shopping.order"][].config.webhook_url`` of a platform profile."""
    caps = (profile.get("ucp") or profile).get("capabilities") or {}
    if isinstance(caps, list):  # the 2026-01 profile form: a list of {name, version, config}
        entries = [c for c in caps if isinstance(c, dict) and c.get("name") == "dev.ucp.shopping.order"]
    else:
        entries = caps.get("dev.ucp.shopping.order") or []
    if isinstance(entries, dict):
        entries = [entries]
    for e in entries:
        url = ((e or {}).get("config") or {}).get("webhook_url")
        if isinstance(url, str) and url:
            return url
    return None


class WebhookWorker:
    """Delivers due outbox events. ``run_once()`` is one scan (tests and the loop use it)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        clock: Clock,
        *,
        signer: WebhookSigner,
        resolve_target: TargetResolver,
        session: aiohttp.ClientSession,
        batch: int = 20,
    ):
        self.pool, self.settings, self.clock = pool, settings, clock
        self.signer, self.resolve_target, self.session, self.batch = signer, resolve_target, session, batch

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
        error = None
        target = row["target_url"] or await self.resolve_target(caller_profile_url(row["caller"]))
        if not target:
            error = "platform profile declares no order webhook_url"
        else:
            error = await self._post(company_id, row, target)
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
        if error is None or attempts >= self.settings.webhook_max_attempts:
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
            async with self.session.post(
                target, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as resp:
                await resp.read()
                return None if 200 <= resp.status < 300 else f"HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return f"{exc.__class__.__name__}: {exc}"[:500]

    async def run_forever(self) -> None:
        while True:
            try:
                await self.run_once()
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                log.warning("webhook scan failed; retrying")
            await asyncio.sleep(self.settings.webhook_poll_interval)


def profile_target_resolver(
    session: aiohttp.ClientSession, *, max_bytes: int = 256 * 1024, timeout: float = 5.0
) -> TargetResolver:
    """Fallback resolver: GET the platform profile (no redirects, size and time bounds) and read its
    order ``webhook_url``. Discovery's cached, SSRF-guarded fetcher replaces it when wired."""

    async def resolve(profile_url: str) -> str | None:
        try:
            async with session.get(
                profile_url, allow_redirects=False, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as resp:
                if resp.status != 200:
                    return None
                raw = await resp.content.read(max_bytes + 1)
                if len(raw) > max_bytes:
                    return None
                return webhook_url_from_profile(json.loads(raw))
        except (TimeoutError, aiohttp.ClientError, ValueError, OSError):
            return None

    return resolve


async def _default_signer(pool: Any, company_id: uuid.UUID, **kw: Any) -> dict[str, str]:
    from .. import httpsig  # type: ignore[attr-defined]  # the signatures package (issue 4)

    return await httpsig.sign_webhook_request(pool, company_id, **kw)


async def webhook_worker_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: run the delivery worker for the app's lifetime."""
    session = aiohttp.ClientSession(auto_decompress=False)
    resolver = app.get(WEBHOOK_TARGETS) or profile_target_resolver(session)
    worker = WebhookWorker(
        app[DATABASE].pool,
        app[SETTINGS],
        app[CLOCK],
        signer=app.get(WEBHOOK_SIGNER) or _default_signer,
        resolve_target=resolver,
        session=session,
    )
    task = asyncio.create_task(worker.run_forever(), name="ucpgw-webhooks")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await session.close()

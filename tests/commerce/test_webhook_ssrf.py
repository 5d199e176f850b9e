"""Order webhooks cannot be aimed at internal addresses (SSRF; reviewer's reproduction: a platform
profile's order ``webhook_url`` of ``http://localhost:8394/...`` or ``http://169.254.169.254/...`` was
stored and POSTed to, with retries).

Everything is real: the gateway app on a socket, the embedded PostgreSQL, the platform (profile and
receiver) on 127.0.0.1, an "internal service" that is a TCP listener on 127.0.0.1 answering HTTP 200
to whatever reaches it, signed deliveries. 127.0.0.1 stands for every internal address: it is on the
dev allowlist only where a test says so (``localhost`` is then the platform's allowlisted name).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from structlog.testing import capture_logs

from ucp_gateway.commerce.context import _http_hosts, _webhook_url
from ucp_gateway.commerce.webhooks import WebhookWorker, profile_target_resolver
from ucp_gateway.config import Settings
from ucp_gateway.db import platform_scan_tx, tenant_tx
from ucp_gateway.discovery import InvalidProfileUrl, ProfileFetcher
from ucp_gateway.discovery.ssrf import system_resolver

from .conftest import SHIP_US, Platform, make_app, new_key, pay, payload, started, url
from .sigutil import sign_webhook, verify


class Internal:
    """A service on 127.0.0.1 that must never be reached: counts connections, answers HTTP 200."""

    def __init__(self) -> None:
        self.hits = 0

    async def start(self) -> Internal:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.hits += 1
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def internal():
    svc = await Internal().start()
    yield svc
    svc.server.close()
    await svc.server.wait_closed()


@pytest.fixture
async def workers(database, clock):
    """``make(settings, resolver=None)``: a worker as the app builds it (own guarded session, targets
    of rows stored without one read through a ProfileFetcher with the same settings)."""
    made: list[tuple[WebhookWorker, ProfileFetcher]] = []

    def make(settings: Settings, resolver=None) -> WebhookWorker:
        fetcher = ProfileFetcher(settings, clock=clock)
        w = WebhookWorker(
            database.pool,
            settings,
            clock,
            signer=sign_webhook,
            resolve_target=profile_target_resolver(fetcher),
            resolver=resolver,
        )
        made.append((w, fetcher))
        return w

    yield make
    for w, f in made:
        await w.close()
        await f.close()


async def _shop(aiohttp_client, database, settings, company, clock):
    app = make_app(database, settings, clock, dev_profile_hosts=settings.dev_profile_hosts)
    return await started(aiohttp_client, app, database, company)


async def _complete(shop, profile_url: str) -> dict:
    """Create and complete a checkout as the platform at ``profile_url``; the order must be created."""
    h = {"UCP-Agent": f'profile="{profile_url}"', "Content-Type": "application/json"}
    r = await shop.post(
        url("/checkout-sessions"), json=payload(fulfillment=SHIP_US), headers={**h, "Idempotency-Key": new_key()}
    )
    co = await r.json()
    assert r.status == 201, co
    r = await shop.post(
        url(f"/checkout-sessions/{co['id']}/complete"), json=pay(), headers={**h, "Idempotency-Key": new_key()}
    )
    done = await r.json()
    assert r.status == 200 and done["status"] == "completed" and done["order"]["id"], done
    return done


async def _outbox(database, company):
    async with tenant_tx(database.pool, company.id) as conn:
        return await conn.fetch("SELECT * FROM webhook_outbox ORDER BY created_at")


async def _queued(database) -> int:
    async with platform_scan_tx(database.pool, "webhook_queue") as conn:
        return await conn.fetchval("SELECT count(*) FROM webhook_queue")


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("http://127.0.0.1:{port}/hook", "webhook URL must use https"),  # loopback, not allowlisted
        ("https://127.0.0.1:{port}/hook", "webhook host is a special-use address"),
        ("https://[::ffff:127.0.0.1]:{port}/hook", "webhook host is a special-use address"),
        ("https://169.254.169.254/latest/meta-data/", "webhook host is a special-use address"),  # link-local
        ("https://10.0.0.7/hook", "webhook host is a special-use address"),  # private
        ("https://user:s3cr3t@platform.example/hook", "webhook URL must not carry credentials"),
        ("https://platform.example:99999/hook", "webhook URL cannot be parsed"),
    ],
)
async def test_internal_webhook_url_is_not_stored_and_never_reached(
    target, reason, aiohttp_client, database, db_settings, company, clock, platform, internal, workers
):
    settings = db_settings.model_copy(update={"dev_profile_hosts": ["localhost"]})  # NOT 127.0.0.1
    shop = await _shop(aiohttp_client, database, settings, company, clock)
    platform.webhook_url = target.format(port=internal.port)
    profile = f"http://localhost:{platform.port}/profile/a.json"

    with capture_logs() as logs:
        await _complete(shop, profile)  # the API call never fails because of the webhook
    (row,) = await _outbox(database, company)
    assert row["target_url"] is None  # not stored
    refusals = [e for e in logs if e["event"] == "webhook_url_refused"]
    assert refusals and all(e["reason"] == reason and e["profile"] == profile for e in refusals)
    assert all(e["log_level"] == "warning" for e in refusals)
    assert "s3cr3t" not in repr(logs) and platform.webhook_url not in repr(logs)

    # the worker reads the profile again (the row has no target) and refuses the URL for good
    w = workers(settings)
    with capture_logs() as logs:
        assert await w.run_once() == 0
    (row,) = await _outbox(database, company)
    assert row["attempts"] == 1 and row["delivered_at"] is None and row["target_url"] is None
    assert row["last_error"] == f"target refused: {reason}"
    assert await _queued(database) == 0  # permanent: no retry
    assert [e["reason"] for e in logs if e["event"] == "webhook_target_refused"] == [reason]
    assert "s3cr3t" not in repr(logs) and platform.webhook_url not in repr(logs)
    clock.advance(86400)
    assert await w.run_once() == 0
    assert (await _outbox(database, company))[0]["attempts"] == 1
    assert internal.hits == 0 and platform.received == []


async def test_http_target_refused_outside_development(
    aiohttp_client, database, db_settings, company, clock, platform, workers
):
    """A row written while 127.0.0.1 was allowlisted in development is refused by a production worker
    (the allowlist is ignored outside development), and negotiation keeps no http URL there."""
    dev = db_settings.model_copy(update={"dev_profile_hosts": ["127.0.0.1"]})
    shop = await _shop(aiohttp_client, database, dev, company, clock)
    await _complete(shop, f"{platform.base}/profile/a.json")
    (row,) = await _outbox(database, company)
    assert row["target_url"] == f"{platform.base}/webhooks"
    async with tenant_tx(database.pool, company.id) as conn:  # as a signed platform's order
        await conn.execute("UPDATE webhook_outbox SET caller = $1", f"{platform.base}/profile/a.json")

    prod = dev.model_copy(update={"environment": "production"})
    assert await workers(prod).run_once() == 0
    (row,) = await _outbox(database, company)
    assert row["last_error"] == "target refused: webhook URL must use https" and row["attempts"] == 1
    assert row["delivered_at"] is None and await _queued(database) == 0
    assert platform.received == []

    caps = {"dev.ucp.shopping.order": [{"config": {"webhook_url": f"{platform.base}/webhooks"}}]}
    prod_hosts = _http_hosts(prod.dev_mode, tuple(prod.dev_profile_hosts))
    assert _webhook_url(caps, prod_hosts, "https://p.example/profile") is None
    assert _webhook_url(caps, _http_hosts(dev.dev_mode, ("127.0.0.1",)), "p") == f"{platform.base}/webhooks"


async def test_allowlisted_dev_host_still_receives(
    aiohttp_client, database, db_settings, company, clock, platform, workers
):
    """An allowlisted name (``localhost``) is stored, resolved by the guarded resolver, and delivered."""
    settings = db_settings.model_copy(update={"dev_profile_hosts": ["localhost"]})
    shop = await _shop(aiohttp_client, database, settings, company, clock)
    platform.webhook_url = f"http://localhost:{platform.port}/webhooks"
    done = await _complete(shop, f"http://localhost:{platform.port}/profile/a.json")
    (row,) = await _outbox(database, company)
    assert row["target_url"] == platform.webhook_url

    assert await workers(settings).run_once() == 1
    ((h, body),) = platform.received
    verify("POST", platform.webhook_url, h, body)
    assert done["order"]["id"].encode() in body
    (row,) = await _outbox(database, company)
    assert row["delivered_at"] is not None and row["last_error"] is None


async def test_name_resolving_to_loopback_refused_at_connect(
    aiohttp_client, database, db_settings, company, clock, platform, internal, workers
):
    """https with a name passes the URL check and is stored; the connection is refused when the name
    resolves to loopback and is not allowlisted (``localhost``), or rebinds there after the check."""
    settings = db_settings.model_copy(update={"dev_profile_hosts": ["127.0.0.1"]})  # the profile's host
    shop = await _shop(aiohttp_client, database, settings, company, clock)
    platform.webhook_url = f"https://localhost:{internal.port}/hook"
    await _complete(shop, f"{platform.base}/profile/a.json")
    platform.webhook_url = f"https://rebind.test:{internal.port}/hook"
    await _complete(shop, f"{platform.base}/profile/b.json")
    rows = await _outbox(database, company)
    assert sorted(r["target_url"] for r in rows) == sorted(
        [f"https://localhost:{internal.port}/hook", f"https://rebind.test:{internal.port}/hook"]
    )

    asked: list[str] = []

    async def dns(host: str, port: int) -> list[str]:  # rebind.test "resolves" to loopback by now
        asked.append(host)
        return ["127.0.0.1"] if host == "rebind.test" else await system_resolver(host, port)

    assert await workers(settings, resolver=dns).run_once() == 0
    rows = await _outbox(database, company)
    assert {r["last_error"] for r in rows} == {"target refused: webhook host resolves to a special-use address"}
    assert all(r["attempts"] == 1 and r["delivered_at"] is None for r in rows)
    assert await _queued(database) == 0
    assert set(asked) == {"localhost", "rebind.test"}
    assert internal.hits == 0


async def test_fallback_target_resolver_fetches_through_the_guard(platform, clock):
    """The profile read for a row without a target goes through discovery's fetcher: a caller URL
    off the allowlist is refused before any request; an allowlisted one gives the webhook_url."""
    settings = Settings(environment="development", dev_profile_hosts=["localhost"])
    fetcher = ProfileFetcher(settings, clock=clock)
    resolve = profile_target_resolver(fetcher)
    try:
        with pytest.raises(InvalidProfileUrl, match="https"):
            await resolve(f"{platform.base}/profile/a.json")
        with pytest.raises(InvalidProfileUrl, match="special-use"):
            await resolve(f"https://127.0.0.1:{platform.port}/profile/a.json")
        assert platform.profile_hits == 0
        assert await resolve(f"http://localhost:{platform.port}/profile/a.json") == f"{platform.base}/webhooks"
        assert platform.profile_hits == 1
    finally:
        await fetcher.close()


async def test_conformance_mode_still_delivers_through_the_fallback(
    aiohttp_client, database, db_settings, company, clock, platform, workers
):
    """Conformance mode: the suite's 2026-01 profile (capability list, refused by the 2026-04-08
    schema) on plain-http loopback; the order is stored without a target and the worker reads the
    webhook_url from the raw profile and delivers to the plain-http loopback receiver."""
    settings = Settings(
        database_url=db_settings.database_url,
        data_dir=db_settings.data_dir,
        keys_dir=db_settings.keys_dir,
        environment="development",
        log_level="warning",
        conformance_mode=True,
    )
    assert settings.dev_profile_hosts == ["127.0.0.1", "localhost"]
    platform.raw_document = {
        "ucp": {
            "version": "2026-01-11",
            "capabilities": [
                {
                    "name": "dev.ucp.shopping.order",
                    "version": "2026-01-11",
                    "config": {"webhook_url": f"{platform.base}/webhooks"},
                }
            ],
        }
    }
    shop = await _shop(aiohttp_client, database, settings, company, clock)
    done = await _complete(shop, f"{platform.base}/profile/a.json")
    (row,) = await _outbox(database, company)
    assert row["target_url"] is None

    assert await workers(settings).run_once() == 1
    ((h, body),) = platform.received
    verify("POST", f"{platform.base}/webhooks", h, body)
    assert done["order"]["id"].encode() in body
    (row,) = await _outbox(database, company)
    assert row["target_url"] == f"{platform.base}/webhooks" and row["delivered_at"] is not None
    clock.advance(timedelta(hours=1).total_seconds())
    assert await workers(settings).run_once() == 0 and len(platform.received) == 1


async def test_the_apps_own_worker_refuses_and_delivers(
    aiohttp_client, database, db_settings, company, clock, platform, internal
):
    """The worker the app runs (webhook_worker_ctx, targets through app[PROFILE_FETCHER]): an internal
    target is refused for good, another platform's allowlisted one is delivered."""
    other = await Platform().start()
    try:
        other.webhook_url = f"http://localhost:{other.port}/webhooks"
        platform.webhook_url = f"http://127.0.0.1:{internal.port}/hook"
        settings = db_settings.model_copy(update={"dev_profile_hosts": ["localhost"]})
        app = make_app(
            database, settings, clock, dev_profile_hosts=["localhost"], webhook_worker=True, webhook_poll_interval=0.05
        )
        shop = await started(aiohttp_client, app, database, company)
        await _complete(shop, f"http://localhost:{platform.port}/profile/a.json")
        clock.advance(1)
        await _complete(shop, f"http://localhost:{other.port}/profile/a.json")
        for _ in range(200):
            rows = await _outbox(database, company)
            if all(r["attempts"] for r in rows) and other.received:
                break
            await asyncio.sleep(0.05)
        first, second = await _outbox(database, company)
        assert first["last_error"] == "target refused: webhook URL must use https" and first["delivered_at"] is None
        assert second["delivered_at"] is not None and len(other.received) == 1
        assert internal.hits == 0 and platform.received == []
    finally:
        await other.runner.cleanup()


async def test_an_unsigned_callers_order_sends_webhooks_only_in_development(
    aiohttp_client, database, db_settings, company, clock, platform, workers
):
    """Regression (security review): an order of an unsigned caller (policy optional/off) sent the
    signed order event to the profile it only claimed, whose platform never placed it. Outside
    development such an order sends none (the conformance suite, in development, still gets its)."""
    from ucp_gateway.commerce.context import webhooks_for

    assert webhooks_for("https://p.example/p.json", False) and webhooks_for("unverified:https://p.example/p.json", True)
    assert not webhooks_for("unverified:https://p.example/p.json", False)

    dev = db_settings.model_copy(update={"dev_profile_hosts": ["127.0.0.1"]})
    shop = await _shop(aiohttp_client, database, dev, company, clock)
    await _complete(shop, f"{platform.base}/profile/a.json")
    (row,) = await _outbox(database, company)
    assert row["caller"] == f"unverified:{platform.base}/profile/a.json"
    prod = dev.model_copy(update={"environment": "production"})
    assert await workers(prod).run_once() == 0
    (row,) = await _outbox(database, company)
    assert row["last_error"] == "target refused: the order's caller is unverified"
    assert await _queued(database) == 0 and platform.received == []

    await _complete(shop, f"{platform.base}/profile/a.json")  # the same in development: delivered
    assert await workers(dev).run_once() == 1
    assert len(platform.received) == 1

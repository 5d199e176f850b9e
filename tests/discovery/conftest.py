"""Fixtures for discovery tests: a real platform-profile server on 127.0.0.1 (the stand-in for a buyer
platform outside the machine) and fetcher settings with the dev loopback allowlist."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
from aiohttp import web
from joserfc.jwk import ECKey

from ucp_gateway.clock import FrozenClock
from ucp_gateway.config import Settings
from ucp_gateway.logs import configure_logging

UCP = "https://ucp.dev/2026-04-08"


def new_jwk(kid: str) -> dict[str, Any]:
    """A real P-256 public JWK (generated, private half discarded)."""
    key = ECKey.generate_key("P-256", parameters={"kid": kid, "use": "sig", "alg": "ES256"})
    return key.as_dict(private=False)


def platform_profile(keys: list[dict[str, Any]], capabilities: dict | None = None, version: str = "2026-04-08"):
    caps = capabilities or {
        "dev.ucp.shopping.checkout": [
            {
                "version": "2026-04-08",
                "spec": f"{UCP}/specification/checkout",
                "schema": f"{UCP}/schemas/shopping/checkout.json",
            }
        ],
        "dev.ucp.shopping.fulfillment": [
            {
                "version": "2026-04-08",
                "spec": f"{UCP}/specification/fulfillment",
                "schema": f"{UCP}/schemas/shopping/fulfillment.json",
                "extends": "dev.ucp.shopping.checkout",
            }
        ],
    }
    return {
        "ucp": {
            "version": version,
            "services": {
                "dev.ucp.shopping": [
                    {
                        "version": "2026-04-08",
                        "spec": f"{UCP}/specification/overview",
                        "transport": "rest",
                        "schema": f"{UCP}/services/shopping/rest.openapi.json",
                    }
                ]
            },
            "capabilities": caps,
            "payment_handlers": {},
        },
        "signing_keys": keys,
    }


@dataclass
class PlatformServer:
    """A controllable platform-profile server. ``hits`` counts requests per path."""

    base: str = ""
    port: int = 0
    keys: list[dict[str, Any]] = field(default_factory=lambda: [new_jwk("k1")])
    hits: dict[str, int] = field(default_factory=dict)
    fail: bool = False
    cache_control: str | None = None
    delay: float = 0.0
    etag: str | None = None
    document: dict | None = None
    released: asyncio.Event = field(default_factory=asyncio.Event)  # ends /slow's wait (set at teardown)

    def url(self, path: str = "/profile") -> str:
        return self.base + path

    def count(self, path: str = "/profile") -> int:
        return self.hits.get(path, 0)


async def _serve(state: PlatformServer) -> web.AppRunner:
    async def count(request: web.Request) -> None:
        state.hits[request.path] = state.hits.get(request.path, 0) + 1

    async def profile(request: web.Request) -> web.StreamResponse:
        await count(request)
        if state.delay:
            await asyncio.sleep(state.delay)
        if state.fail:
            return web.Response(status=503, text="down")
        headers = {}
        if state.cache_control:
            headers["Cache-Control"] = state.cache_control
        if state.etag:
            headers["ETag"] = state.etag
            if request.headers.get("If-None-Match") == state.etag:
                return web.Response(status=304, headers=headers)
        doc = state.document or platform_profile(state.keys)
        return web.json_response(doc, headers=headers)

    async def redirect(request: web.Request) -> web.Response:
        await count(request)
        raise web.HTTPFound("/profile")

    async def slow(request: web.Request) -> web.Response:
        await count(request)
        # 5 s, far past the fetchers' read timeouts; cut short once the test is done, so that the
        # server's cleanup (which waits for its handlers) does not wait out the rest of it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.released.wait(), 5)
        return web.json_response(platform_profile(state.keys))

    async def big(request: web.Request) -> web.StreamResponse:
        await count(request)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            await resp.write(b'{"ucp": {"pad": "')
            for _ in range(64):  # 4 MiB if nobody stops reading
                await resp.write(b"x" * 65536)
        except (ConnectionResetError, RuntimeError):
            pass
        return resp

    async def big_declared(request: web.Request) -> web.Response:
        await count(request)
        return web.Response(body=b"x" * (300 * 1024), content_type="application/json")

    async def text(request: web.Request) -> web.Response:
        await count(request)
        return web.Response(text="<html>not json</html>", content_type="text/html")

    async def repeated(request: web.Request) -> web.Response:
        await count(request)
        return web.Response(
            body=b'{"ucp": {"version": "a", "version": "b"}, "n": NaN}', content_type="application/json"
        )

    async def invalid(request: web.Request) -> web.Response:
        await count(request)
        return web.json_response({"ucp": {"version": "draft", "capabilities": {}}})

    async def private(request: web.Request) -> web.Response:
        await count(request)
        key = ECKey.generate_key("P-256", parameters={"kid": "leak"}).as_dict(private=True)
        return web.json_response(platform_profile([key]))

    app = web.Application()
    for path, handler in [
        ("/profile", profile),
        ("/other", profile),
        ("/third", profile),
        ("/redirect", redirect),
        ("/slow", slow),
        ("/big", big),
        ("/big-declared", big_declared),
        ("/text", text),
        ("/repeated", repeated),
        ("/invalid", invalid),
        ("/private", private),
    ]:
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.base = f"http://127.0.0.1:{state.port}"
    return runner


@pytest.fixture
async def platform_server() -> AsyncIterator[PlatformServer]:
    state = PlatformServer()
    runner = await _serve(state)
    try:
        yield state
    finally:
        state.released.set()
        await runner.cleanup()


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


def fetch_settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = dict(
        environment="development",
        dev_profile_hosts=["127.0.0.1", "localhost"],
        profile_fetch_connect_timeout=1.0,
        profile_fetch_read_timeout=0.4,
    )
    base.update(overrides)
    return Settings(**base)


def dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()


@contextlib.contextmanager
def json_logs(settings: Settings, level: str) -> Iterator[tuple[Settings, io.StringIO]]:
    """Logging configured as the gateway does at ``level`` with JSON lines into a StringIO; yields
    (the settings with that level, the stream) and restores the root logger and structlog after."""
    stream = io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    settings = settings.model_copy(update={"log_level": level, "log_format": "json"})
    configure_logging(settings, stream=stream)
    try:
        yield settings, stream
    finally:
        structlog.reset_defaults()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)

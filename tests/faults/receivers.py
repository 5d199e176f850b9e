"""Local webhook receivers on 127.0.0.1 (real aiohttp servers, one port for all of them).

``POST /{name}`` answers as receiver ``name`` behaves (``behave[name]``: ``"ok"``, ``"fail"`` (500),
``"hang"`` (never answers), or a number of seconds to wait before a 200). Every request is recorded
as ``(name, Webhook-Id, monotonic arrival time)`` and in-flight counts are tracked per receiver.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from aiohttp import web


class Receivers:
    def __init__(self) -> None:
        self.behave: dict[str, object] = {}
        self.received: list[tuple[str, str, float]] = []
        self.done: list[tuple[str, str, float]] = []  # answered 2xx: (name, id, answered at)
        self.inflight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.peak_total = 0
        self._release = asyncio.Event()

    async def start(self) -> Receivers:
        app = web.Application()
        app.router.add_post("/{name}", self._hook)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    async def stop(self) -> None:
        self._release.set()
        await self.runner.cleanup()

    def ids(self, name: str) -> list[str]:
        return [i for n, i, _ in self.done if n == name]

    async def _hook(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        wid = request.headers.get("Webhook-Id", "")
        await request.read()
        self.received.append((name, wid, time.monotonic()))
        self.inflight[name] += 1
        self.peak[name] = max(self.peak[name], self.inflight[name])
        self.peak_total = max(self.peak_total, sum(self.inflight.values()))
        try:
            how = self.behave.get(name, "ok")
            if how == "hang":
                await self._release.wait()
                return web.Response(status=503)
            if how == "fail":
                return web.Response(status=500)
            if isinstance(how, (int, float)):
                await asyncio.sleep(how)
            self.done.append((name, wid, time.monotonic()))
            return web.Response(status=200)
        finally:
            self.inflight[name] -= 1

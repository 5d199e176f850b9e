"""Serving: graceful shutdown finishes in-flight requests; logs are JSON lines with the request id."""

from __future__ import annotations

import asyncio
import io
import json

import aiohttp
from aiohttp import web

from ucp_gateway import app as app_module
from ucp_gateway.logs import configure_logging
from ucp_gateway.serve import run_server


async def test_in_flight_request_finishes_after_stop_and_logs_carry_request_id(db_settings, monkeypatch):
    started = asyncio.Event()

    async def slow(request):
        started.set()
        await asyncio.sleep(0.5)
        return web.json_response({"done": True})

    def add_slow(app):
        app.router.add_get("/_test/slow", slow)

    monkeypatch.setattr(app_module, "COMPONENTS", [*app_module.COMPONENTS, add_slow])
    stream = io.StringIO()
    settings = db_settings.model_copy(update={"port": 0, "log_level": "info"})
    configure_logging(settings, stream=stream)
    # port 0: find the bound port from the "listening" log line
    stop = asyncio.Event()
    server = asyncio.create_task(run_server(settings, stop=stop))
    for _ in range(200):
        await asyncio.sleep(0.02)
        lines = [json.loads(x) for x in stream.getvalue().splitlines() if x.startswith("{")]
        url = next((x["url"] for x in lines if x.get("event") == "listening"), None)
        if url:
            break
    assert url, stream.getvalue()
    async with aiohttp.ClientSession() as s:
        req = asyncio.create_task(s.get(f"{url}/_test/slow", headers={"Request-Id": "inflight-1"}))
        await started.wait()
        stop.set()  # what SIGTERM does
        resp = await req
        assert resp.status == 200 and (await resp.json()) == {"done": True}
        assert resp.headers["Request-Id"] == "inflight-1"
    await asyncio.wait_for(server, 15)
    lines = [json.loads(x) for x in stream.getvalue().splitlines() if x.startswith("{")]
    access = [x for x in lines if x.get("event") == "request" and x.get("path") == "/_test/slow"]
    assert access and access[0]["request_id"] == "inflight-1" and access[0]["status"] == 200
    assert [x["event"] for x in lines if x["event"] in ("shutting_down", "stopped")] == ["shutting_down", "stopped"]


async def test_startup_objects_are_frozen_out_of_the_collector_while_serving(db_settings):
    """A full collection under load traverses only what requests left behind: the app and its
    imports are in the permanent generation while serving, and collectable again afterwards."""
    import gc

    assert gc.get_freeze_count() == 0
    seen = []
    stop = asyncio.Event()

    async def hook(app):  # before serving: nothing frozen yet
        seen.append(gc.get_freeze_count())

    server = asyncio.create_task(run_server(db_settings.model_copy(update={"port": 0}), before_serve=hook, stop=stop))
    for _ in range(500):
        await asyncio.sleep(0.02)
        if gc.get_freeze_count():
            break
    frozen = gc.get_freeze_count()
    stop.set()
    await asyncio.wait_for(server, 15)
    assert seen == [0]
    assert frozen > 10_000  # the app, pydantic models, modules
    assert gc.get_freeze_count() == 0


def test_serving_loop_is_uvloop_when_installed_and_asyncio_on_request(monkeypatch):
    import sys

    import pytest

    from ucp_gateway.config import Settings
    from ucp_gateway.errors import ConfigError
    from ucp_gateway.serve import loop_factory, run

    async def loop_type():
        return type(asyncio.get_running_loop()).__module__

    auto = Settings(database_url="postgresql://unused/x")
    uvloop = pytest.importorskip("uvloop")
    assert loop_factory(auto) is uvloop.new_event_loop
    assert run(auto, loop_type()).startswith("uvloop")
    plain = auto.model_copy(update={"event_loop": "asyncio"})
    assert loop_factory(plain) is None and run(plain, loop_type()).startswith("asyncio")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed
    assert loop_factory(auto) is None
    with pytest.raises(ConfigError):
        loop_factory(auto.model_copy(update={"event_loop": "uvloop"}))


def test_pool_size_defaults_to_the_cores_shared_out_over_the_workers():
    """Regression (checkout bench): 10 connections per process on 2 cores cost PostgreSQL CPU per
    flow; the default is now two per core plus two, over all serving processes."""
    import os

    from ucp_gateway.config import Settings

    cores = len(os.sched_getaffinity(0))
    base = Settings(database_url="postgresql://unused/x")
    assert base.db_pool_max is None
    assert base.db_pool_size == max(2 * cores + 2, base.db_pool_min)
    two = base.model_copy(update={"workers": 2})
    assert two.db_pool_size == max(-(-(2 * cores + 2) // 2), base.db_pool_min)  # rounded up
    assert base.model_copy(update={"workers": 64}).db_pool_size == base.db_pool_min  # never below the minimum
    assert base.model_copy(update={"db_pool_max": 10, "workers": 4}).db_pool_size == 10  # an explicit size stands


async def _listening_url(stream: io.StringIO) -> str:
    for _ in range(300):
        await asyncio.sleep(0.02)
        lines = [json.loads(x) for x in stream.getvalue().splitlines() if x.startswith("{")]
        url = next((x["url"] for x in lines if x.get("event") == "listening"), None)
        if url:
            return url
    raise AssertionError(stream.getvalue())


async def test_connection_without_a_complete_request_is_closed_after_the_keepalive_timeout(db_settings):
    """A client that sends half a request line and headers, or goes idle after an answer, does not
    hold its socket for aiohttp's default hour: it is closed after ``http_keepalive_timeout``."""
    stream = io.StringIO()
    settings = db_settings.model_copy(update={"port": 0, "log_level": "info", "http_keepalive_timeout": 1.0})
    configure_logging(settings, stream=stream)
    stop = asyncio.Event()
    server = asyncio.create_task(run_server(settings, stop=stop))
    try:
        url = await _listening_url(stream)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        loop = asyncio.get_running_loop()

        # headers still arriving: closed by the server (EOF) within the timeout, no answer
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        await writer.drain()
        t0 = loop.time()
        data = await asyncio.wait_for(reader.read(), 10)
        assert data == b"" and 0.5 <= loop.time() - t0 < 6
        writer.close()

        # idle keep-alive after a complete answer: answered, then closed the same way
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200")
        length = int(next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")).split(b":")[1])
        await reader.readexactly(length)
        t0 = loop.time()
        assert await asyncio.wait_for(reader.read(), 10) == b""
        assert 0.5 <= loop.time() - t0 < 6
        writer.close()
    finally:
        stop.set()
        await asyncio.wait_for(server, 15)


def test_keepalive_timeout_defaults_to_75_seconds_not_aiohttps_hour():
    from ucp_gateway.config import Settings

    assert Settings().http_keepalive_timeout == 75.0


def test_stdlib_lines_are_json_and_keep_a_real_faults_traceback(db_settings):
    """Lines of stdlib loggers go through the gateway's renderer; only aiohttp's parser refusals (4xx,
    tests/discovery/test_front_path.py) lose their traceback: a real fault keeps it, as a field."""
    import logging

    import structlog

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging(db_settings.model_copy(update={"log_format": "json"}), stream=stream)
    try:
        logging.getLogger("aiohttp.server").warning("plain %s", "words")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("aiohttp.server").exception("Error handling request from %s", "10.0.0.1")
    finally:
        structlog.reset_defaults()
        root.handlers[:], level = saved
        root.setLevel(level)
    first, second = (json.loads(x) for x in stream.getvalue().splitlines())
    assert first["event"] == "plain words" and first["level"] == "warning" and first["logger"] == "aiohttp.server"
    assert "positional_args" not in first and "timestamp" in first
    assert second["level"] == "error" and "RuntimeError: boom" in second["exception"]


async def _http_get(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, host: str = "127.0.0.1"
) -> bytes:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)  # to EOF
    finally:
        writer.close()


async def test_connections_made_before_the_stop_are_answered_and_new_ones_refused(db_settings):
    """Regression (newcomer: ``serve --workers 2`` reset clients on SIGTERM). A connection the kernel
    completed before the stop is answered, whether the loop had accepted it and its request comes
    after the stop (aiohttp closed such idle connections at once), or it was still in the accept
    queue; a connection after the stop is refused, not queued and reset."""
    from ucp_gateway.serve import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    stop = asyncio.Event()
    server = asyncio.create_task(run_server(db_settings.model_copy(update={"port": port}), stop=stop, sock=sock))
    for _ in range(500):  # the socket queues from bind: wait until the app answers
        if (await _http_get(*await asyncio.open_connection("127.0.0.1", port), "/healthz")).startswith(b"HTTP/1.1 200"):
            break
        await asyncio.sleep(0.02)
    early = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(0.2)  # accepted by the loop by now, no request yet
    late = await asyncio.open_connection("127.0.0.1", port)  # accepted or still queued
    stop.set()  # what SIGTERM does
    await asyncio.sleep(0.1)  # the stop has begun: the listening socket is closed
    answers = await asyncio.gather(_http_get(*early, "/healthz"), _http_get(*late, "/.well-known/ucp", "platform.test"))
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 2
    try:
        await asyncio.open_connection("127.0.0.1", port)
        raise AssertionError("a connection after the stop was accepted")
    except ConnectionRefusedError:
        pass
    await asyncio.wait_for(server, 15)

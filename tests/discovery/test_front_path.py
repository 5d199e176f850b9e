"""The front path (``middleware.front_handler``, installed by ``serve.run_server``): ``/.well-known/ucp``
answered before aiohttp's router and middleware chain, byte for byte what the foundation layer's fast
path and the full path answer. Real sockets, the production serve path, a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from ucp_gateway.app import create_app
from ucp_gateway.clock import FrozenClock
from ucp_gateway.middleware import HOST_CACHE, PUBLIC_FAST_PATHS, PublicPath
from ucp_gateway.serve import bind_socket, install_front, run_server
from ucp_gateway.tenancy import create_company

from .conftest import json_logs

PATH = "/.well-known/ucp"
RID = "front-path-test-1"


@asynccontextmanager
async def _serving(settings, *, front: bool):
    """``run_server`` on a free loopback port; yields ``(port, app, calls)`` where ``calls`` lists, per
    ask of the fast path, ``(who, status or 0)``: who is ``front`` (front path) or ``foundation``."""
    calls: list[tuple[str, int]] = []
    ready: asyncio.Future[web.Application] = asyncio.get_running_loop().create_future()

    async def hook(app: web.Application) -> None:
        public = app[PUBLIC_FAST_PATHS][PATH]

        def counting(request, host):
            resp = public.answer(request, host)
            calls.append((sys._getframe(1).f_code.co_name, 0 if resp is None else resp.status))
            return resp

        app[PUBLIC_FAST_PATHS][PATH] = PublicPath(public.handler, counting)
        ready.set_result(app)

    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(settings, before_serve=hook, stop=stop, sock=sock, front=front))
    try:
        app = await asyncio.wait_for(asyncio.shield(ready), 60)
        for _ in range(100):  # the site starts right after the hook
            if (await _raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))[0]:
                break
            await asyncio.sleep(0.05)
        yield port, app, calls
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def _raw(port: int, request: bytes) -> tuple[bytes, bytes]:
    """One request on its own connection: (final status line + headers without Date, body)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return b"", b""
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        interim = b""
        while head.startswith(b"HTTP/1.1 100"):  # Expect: 100-continue (kept: part of the answer)
            interim, head = interim + head, await reader.readuntil(b"\r\n\r\n")
        lines = [line for line in (interim + head).split(b"\r\n") if not line.lower().startswith(b"date:")]
        length = next((int(x.split(b":", 1)[1]) for x in lines if x.lower().startswith(b"content-length:")), 0)
        bodyless = request.startswith(b"HEAD ") or head.startswith((b"HTTP/1.1 304", b"HTTP/1.1 204"))
        body = b"" if bodyless or not length else await reader.readexactly(length)
        return b"\r\n".join(lines), body
    finally:
        writer.close()


def _req(method: str = "GET", target: str = PATH, host: str = "shop.test", extra: str = "", body: bytes = b"") -> bytes:
    rid = "" if "Request-Id" in extra else f"Request-Id: {RID}\r\n"
    length = f"Content-Length: {len(body)}\r\n" if body else ""
    return f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{rid}{extra}{length}\r\n".encode() + body


@pytest.fixture
async def shop(database):
    await create_company(database.pool, slug="shop", display_name="Shop", hostnames=["shop.test"])


async def test_front_answers_are_byte_identical_to_the_foundation_and_the_full_path(shop, db_settings) -> None:
    async with _serving(db_settings, front=True) as (front_port, _, front_calls):
        async with _serving(db_settings, front=False) as (mw_port, mw_app, mw_calls):
            for port in (front_port, mw_port):  # render and cache both profiles; the router is seen for GET/HEAD
                for warm in (_req(), _req("HEAD"), _req(host="platform.test"), _req(host="platform.test")):
                    assert (await _raw(port, warm))[0].startswith(b"HTTP/1.1 200")
            head, _ = await _raw(front_port, _req())
            etag = next(x for x in head.split(b"\r\n") if x.startswith(b"ETag: "))[6:].decode()
            cases = [  # (request, who answers on the front server: front, foundation or full)
                (_req(), "front"),
                (_req(extra=f"If-None-Match: {etag}\r\n"), "front"),
                (_req(extra='If-None-Match: "x"\r\nIf-None-Match: ' + etag + "\r\n"), "front"),
                (_req(extra="If-None-Match: *\r\n"), "front"),
                (_req("HEAD"), "front"),
                (_req("HEAD", extra=f"If-None-Match: {etag}\r\n"), "front"),
                (_req(host="platform.test"), "front"),  # the platform node
                (_req(host="nobody.test"), "full"),  # 404 on no company's nor the platform's host, never cached
                (_req(host="SHOP.test"), "full"),  # not rendered for this spelling yet (then cached)
                (_req(extra='UCP-Agent: profile="https://agent.example/.well-known/ucp"\r\n'), "front"),
                (_req(extra="Request-Id: bad id!\r\n"), "front"),  # a fresh id (compared apart)
                (_req("POST"), "full"),  # 405 with Allow: never learnt, the router answers
                (_req("DELETE"), "full"),
                (_req("OPTIONS"), "full"),
                (_req(target=PATH + "?x=%00"), "full"),  # 400, refused in the foundation layer
                (_req(target=PATH + "?a=1"), "foundation"),  # not the exact target: after the router
                (_req(target="/.well-known%2Fucp"), "full"),  # 404
                (_req(target="/.well-known/ucp/"), "full"),  # 404
                (_req(extra="Expect: 100-continue\r\n"), "foundation"),  # aiohttp answers Expect first
                (_req(extra='Signature: sig1=:AAAA:\r\nSignature-Input: sig1=("@method");keyid="k"\r\n'), "full"),
                (_req(extra='Accept-Signature: sig1=("@status");keyid="k"\r\n'), "full"),
                (_req(body=b"x" * 10), "full"),  # a body: the signature middleware reads it
                (_req(host="bad host"), "full"),  # 400, never cached
            ]
            for request, who in cases:
                saved = mw_app[PUBLIC_FAST_PATHS][PATH]
                mw_app[PUBLIC_FAST_PATHS][PATH] = PublicPath(saved.handler, _never)
                try:
                    full = await _raw(mw_port, request)  # no fast path at all: the full path
                finally:
                    mw_app[PUBLIC_FAST_PATHS][PATH] = saved
                n = len(front_calls)
                got_front = await _raw(front_port, request)
                got_mw = await _raw(mw_port, request)
                answered = [w for w, status in front_calls[n:] if status]
                assert answered == ([] if who == "full" else [who]), (request, front_calls[n:])
                assert b"\r\nServer: ucp-gateway" in got_front[0] and b"\r\nRequest-Id: " in got_front[0], request
                if b"bad id" in request:  # a fresh 32-hex id each time
                    got_front, got_mw, full = (_no_request_id(x) for x in (got_front, got_mw, full))
                assert got_front == got_mw == full, request
            assert {w for w, _ in mw_calls} <= {"foundation"}  # front off: never the front
    # a host-cache miss: the front declines, the foundation layer resolves the Host and answers
    async with _serving(db_settings, front=True) as (port, app, calls):
        ref = await _raw(port, _req())  # renders (full path), learns GET
        assert await _raw(port, _req()) == ref
        app[HOST_CACHE].clear()
        n = len(calls)
        assert await _raw(port, _req()) == ref and [w for w, s in calls[n:] if s] == ["foundation"]
        assert await _raw(port, _req()) == ref and [w for w, s in calls[n + 1 :] if s] == ["front"]


def _never(request, host):
    return None


def _no_request_id(answer: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    head, body = answer
    lines = head.split(b"\r\n")
    ids = [x for x in lines if x.startswith(b"Request-Id: ")]
    assert len(ids) == 1 and len(ids[0]) == len(b"Request-Id: ") + 32, ids
    return b"\r\n".join(x for x in lines if x not in ids), body


async def test_a_failing_answer_in_front_is_asked_again_behind_the_router(shop, db_settings) -> None:
    """A fault in the answer never becomes the response: the front declines, the foundation layer
    meets it again (and logs it with the request id), the handler answers."""
    async with _serving(db_settings, front=True) as (port, app, _):
        ref = await _raw(port, _req())  # renders, learns GET
        public = app[PUBLIC_FAST_PATHS][PATH]
        seen: list[str] = []

        def broken(request, host):
            seen.append(sys._getframe(1).f_code.co_name)
            raise RuntimeError("bug")

        app[PUBLIC_FAST_PATHS][PATH] = PublicPath(public.handler, broken)
        app[PUBLIC_FAST_PATHS][PATH].methods.update(public.methods)
        assert await _raw(port, _req()) == ref
        assert seen == ["front", "foundation"]  # declined in front, asked again and logged behind the router


@pytest.mark.parametrize("level", ["warning", "info"])
async def test_front_answers_log_like_the_foundation_layer(shop, db_settings, level) -> None:
    """At info the front's answer has its access-log line with the request id; at warning none."""
    with json_logs(db_settings, level) as (settings, stream):
        async with _serving(settings, front=True) as (port, _, calls):
            for _ in range(3):
                assert (await _raw(port, _req()))[0].startswith(b"HTTP/1.1 200")
            assert [w for w, s in calls if s] == ["front", "front"]  # the first renders (and learns GET)
        lines = [json.loads(x) for x in stream.getvalue().splitlines() if x.startswith("{")]
        access = [x for x in lines if x.get("event") == "request" and x.get("path") == PATH]
        if level == "info":
            assert len(access) == 3 and {x["request_id"] for x in access} == {RID}
            assert all(x["status"] == 200 and x["method"] == "GET" and "duration_ms" in x for x in access)
            assert access[0].keys() == access[1].keys() == access[2].keys()  # full path and front lines alike
        else:
            assert access == []


@pytest.mark.parametrize("change", ["none", "outer_middleware", "on_response_prepare", "subapp"])
async def test_install_front_only_where_it_answers_what_the_app_would(database, db_settings, change) -> None:
    app = create_app(db_settings, clock=FrozenClock(), database=database)

    @web.middleware
    async def outer(request, handler):
        return await handler(request)

    async def prepare(request, response):
        return None

    if change == "outer_middleware":
        app.middlewares.insert(0, outer)
    elif change == "on_response_prepare":
        app.on_response_prepare.append(prepare)
    elif change == "subapp":
        app.add_subapp("/sub", web.Application())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        before = runner.server.request_handler
        assert install_front(runner) is (change == "none")
        assert (runner.server.request_handler is before) is (change != "none")
    finally:
        await runner.cleanup()


async def test_requests_without_one_host_are_400_and_logged_as_json_lines(database, db_settings) -> None:
    """Regression (newcomer): no Host or two Host lines got aiohttp's plain 400 and a traceback from
    ``aiohttp.server`` in the log. aiohttp's parser refuses HTTP/1.1 without Host and two Host lines
    before any handler runs (its plain-text 400 stays: aiohttp 3.x offers no supported hook for that
    body, aio-libs/aiohttp#3287); its log line is now one JSON ``bad_http_request`` warning. HTTP/1.0
    may omit Host, and ``request.host`` then was the server's own address: the company bound to
    127.0.0.1 answered, from the front path too; now it is the gateway's JSON 400."""
    await create_company(database.pool, slug="local", display_name="Local", hostnames=["127.0.0.1"])
    with json_logs(db_settings, "warning") as (settings, stream):
        async with _serving(settings, front=True) as (port, _, calls):
            for _ in range(2):  # renders and caches 127.0.0.1's profile; the second is the front's answer
                assert (await _raw(port, _req(host="127.0.0.1")))[0].startswith(b"HTTP/1.1 200")
            assert [w for w, s in calls if s] == ["front"]
            for target in (PATH, "/ucp/v1/checkout-sessions/x", "/api/v1/agent/verbs"):
                head, body = await _raw(port, f"GET {target} HTTP/1.0\r\n\r\n".encode())
                assert head.startswith(b"HTTP/1.0 400") and b"\r\nServer: ucp-gateway" in head, (target, head)
                assert json.loads(body) == {"code": "invalid_request", "content": "the request has no Host header"}
            assert [w for w, s in calls if s] == ["front"]  # the front declined the Host-less request
            head, body = await _raw(port, b"GET /healthz HTTP/1.0\r\n\r\n")  # probes need no Host
            assert head.startswith(b"HTTP/1.0 200"), head
            for raw in (
                b"GET /healthz HTTP/1.1\r\n\r\n",
                f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: shop.test\r\n\r\n".encode(),
                b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            ):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(raw)
                answer = await asyncio.wait_for(reader.read(), 10)  # aiohttp closes after its error
                writer.close()
                assert answer.startswith(b"HTTP/1.0 400 Bad Request\r\n"), answer
        text = stream.getvalue()
    assert "Traceback" not in text
    lines = [json.loads(x) for x in text.splitlines()]  # every line is JSON, aiohttp's included
    bad = [x for x in lines if x.get("event") == "bad_http_request"]
    assert [(x["level"], x["logger"], x["status"]) for x in bad] == [("warning", "aiohttp.server", 400)] * 3, lines
    assert ["Host" in bad[0]["reason"], "Host" in bad[1]["reason"], "Content-Length" in bad[2]["reason"]] == [True] * 3
    assert all(x["remote"] == "127.0.0.1" and "exception" not in x and "exc_info" not in x for x in bad)


async def test_absolute_form_target_must_name_the_host_header(shop, database, db_settings) -> None:
    """Regression (newcomer): for an absolute-form target (RFC 9112 §3.2.2) aiohttp's ``request.host``
    is the target's host while the tenant was chosen by the Host header, so ``GET http://b/...`` with
    ``Host: a`` rendered a's profile with b's URLs and cached it as b's profile (a's keys under b's
    host, for every later client of b). A target whose authority is not the Host is now a 400."""
    await create_company(database.pool, slug="other", display_name="Other", hostnames=["other.test"])
    async with _serving(db_settings, front=True) as (port, _, _):
        before = await _raw(port, _req(host="other.test"))
        assert before[0].startswith(b"HTTP/1.1 200") and b"other.test" in before[1] and b"shop.test" not in before[1]
        for target, host in (
            ("http://other.test/.well-known/ucp", "shop.test"),
            ("http://shop.test/.well-known/ucp", "other.test"),
            ("http://shop.test:8080/.well-known/ucp", "shop.test"),
            ("https://user@shop.test/.well-known/ucp", "shop.test"),
        ):
            head, body = await _raw(port, _req(target=target, host=host))
            assert head.startswith(b"HTTP/1.1 400"), (target, host, head)
            assert json.loads(body) == {
                "code": "invalid_request",
                "content": "the request target's authority does not match the Host header",
            }
        after = await _raw(port, _req(host="other.test"))
        assert after[1] == before[1]  # other.test's profile is still its own
        # the target naming the Host (any case) is served as the origin-form request is
        head, body = await _raw(port, _req(target="http://Other.Test/.well-known/ucp", host="other.test"))
        assert head.startswith(b"HTTP/1.1 200") and body == before[1]


async def test_a_host_with_a_user_part_is_refused_and_poisons_nothing(shop, database, db_settings) -> None:
    """Regression (security tester): ``Host: a:x@b`` with the same absolute-form target passed the
    authority check, and tenancy read it as host ``a`` (one colon: a port) while aiohttp's
    ``request.host`` was ``b``: a's profile and keys were cached and served as b's. Only a plain
    ``host[:port]`` Host is resolved now; anything else is a 400, in either request form."""
    await create_company(database.pool, slug="other", display_name="Other", hostnames=["other.test"])
    settings = db_settings.model_copy(update={"profile_render_ttl": 0.0})  # every answer re-renders after it
    async with _serving(settings, front=True) as (port, _, _):
        before = {h: await _raw(port, _req(host=h)) for h in ("shop.test", "other.test")}
        for h, doc in before.items():
            assert doc[0].startswith(b"HTTP/1.1 200") and h.encode() in doc[1]
        for authority in ("other.test:x@shop.test", "shop.test:1@other.test", "x@other.test", ":@shop.test"):
            for target in (f"http://{authority}/.well-known/ucp", PATH):
                head, body = await _raw(port, _req(target=target, host=authority))
                assert head.startswith(b"HTTP/1.1 400"), (target, head)
                assert json.loads(body)["code"] == "invalid_request"
        for _ in range(3):  # stale answers re-render: a poisoned entry would show within two asks
            for h, doc in before.items():
                assert (await _raw(port, _req(host=h)))[1] == doc[1], h
            await asyncio.sleep(0.05)

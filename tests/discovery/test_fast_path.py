"""``/.well-known/ucp`` answered from the foundation layer (``app[PUBLIC_FAST_PATHS]``): the same bytes
as the full middleware path, and only for requests the trust and signature middlewares would not touch."""

from __future__ import annotations

import json

import pytest
from multidict import CIMultiDict
from yarl import URL

from ucp_gateway.app import create_app
from ucp_gateway.clock import FrozenClock
from ucp_gateway.middleware import FOUNDATION, HOST_CACHE, PUBLIC_FAST_PATHS, PublicPath
from ucp_gateway.tenancy import create_company

from .conftest import json_logs

PATH = "/.well-known/ucp"
RID = {"Request-Id": "fast-path-test-1"}


async def _counting_client(aiohttp_client, app):
    """A test client of ``app`` whose fast path is counted: ``client.answered`` lists the status of
    each answer it gave (0 when it declined)."""
    answered: list[int] = []
    public = app[PUBLIC_FAST_PATHS][PATH]  # PublicPath(well_known_ucp, discovery.web.public_fast_path(...))

    def counting(request, host):
        resp = public.answer(request, host)
        answered.append(0 if resp is None else resp.status)
        return resp

    app[PUBLIC_FAST_PATHS][PATH] = PublicPath(public.handler, counting)
    client = await aiohttp_client(app)
    client.answered = answered
    return client


@pytest.fixture
async def gw(aiohttp_client, database, db_settings):
    """The real app (create_app) with the fast path counted: ``answered`` lists what it answered."""
    await create_company(database.pool, slug="shop", display_name="Shop", hostnames=["shop.test"])
    client = await _counting_client(aiohttp_client, create_app(db_settings, clock=FrozenClock(), database=database))
    client.settings = db_settings
    return client


async def _wire(client, method: str, headers: dict[str, str], fast: bool, data: bytes | None = None, path: str = PATH):
    """(status, raw headers without Date, body) with the fast path on or off."""
    app = client.server.app
    saved = app[PUBLIC_FAST_PATHS].pop(PATH)
    if fast:
        app[PUBLIC_FAST_PATHS][PATH] = saved
    try:
        resp = await client.request(method, path, headers={**RID, **headers}, data=data, allow_redirects=False)
        body = await resp.read()
    finally:
        app[PUBLIC_FAST_PATHS][PATH] = saved
    return resp.status, [(k, v) for k, v in resp.raw_headers if k.lower() != b"date"], body


async def _same_both_ways(client, method: str, headers: dict[str, str], data: bytes | None = None, path: str = PATH):
    before = len(client.answered)
    full = await _wire(client, method, headers, fast=False, data=data, path=path)
    fast = await _wire(client, method, headers, fast=True, data=data, path=path)
    assert fast == full
    return fast, client.answered[before:]


async def test_fast_answer_is_byte_identical_to_the_full_path(gw) -> None:
    first = await gw.get(PATH, headers={"Host": "shop.test"})  # renders and caches the profile
    assert first.status == 200 and gw.answered == [0]  # nothing cached yet: the full path rendered it
    etag = first.headers["ETag"]
    (status, headers, body), used = await _same_both_ways(gw, "GET", {"Host": "shop.test"})
    assert status == 200 and used == [200] and body == await first.read()
    names = [k.lower() for k, _ in headers]
    assert names == [b"cache-control", b"etag", b"content-type", b"request-id", b"server", b"content-length"]
    assert dict(headers)[b"Server"] == b"ucp-gateway"
    assert dict(headers)[b"Cache-Control"] == b"public, max-age=300" and dict(headers)[b"ETag"] == etag.encode()
    assert dict(headers)[b"Request-Id"] == RID["Request-Id"].encode()
    # 304 on If-None-Match, HEAD, a UCP-Agent header (trust never acts on /.well-known/), a query
    for method, extra, want in (
        ("GET", {"If-None-Match": etag}, 304),
        ("GET", {"If-None-Match": f'"x", W/{etag}'}, 304),
        ("HEAD", {}, 200),
        ("HEAD", {"If-None-Match": etag}, 304),
        ("GET", {"UCP-Agent": 'profile="https://agent.example/.well-known/ucp"'}, 200),
    ):
        (status, _, body), used = await _same_both_ways(gw, method, {"Host": "shop.test", **extra})
        assert status == want and used == [want], (method, extra)
        assert body == (b"" if want == 304 or method == "HEAD" else await first.read())
    # regression: If-None-Match on two header lines is one list (RFC 9110 §5.3); only the first was read
    two = CIMultiDict([("Host", "shop.test"), ("If-None-Match", '"x"'), ("If-None-Match", etag)])
    before = len(gw.answered)
    assert (await gw.get(PATH, headers=two)).status == 304 and gw.answered[before:] == [304]  # fast path
    saved = gw.server.app[PUBLIC_FAST_PATHS].pop(PATH)
    try:
        assert (await gw.get(PATH, headers=two)).status == 304  # full path
    finally:
        gw.server.app[PUBLIC_FAST_PATHS][PATH] = saved


async def test_the_platform_host_gets_the_platform_node_an_unknown_one_404_and_a_bad_host_the_full_path(gw) -> None:
    await gw.get(PATH, headers={"Host": "platform.test"})  # platform node, rendered once
    (status, _, body), used = await _same_both_ways(gw, "GET", {"Host": "platform.test"})
    assert status == 200 and used == [200] and b'"ucp"' in body
    await gw.get(PATH, headers={"Host": "nobody.test"})  # resolved: no company, not the platform's
    (status, _, body), used = await _same_both_ways(gw, "GET", {"Host": "nobody.test"})
    assert status == 404 and used == [0] and json.loads(body)["code"] == "not_found"  # never cached: declined
    (status, _, _), used = await _same_both_ways(gw, "GET", {"Host": "bad host"})
    # never resolved nor cached by the host cache, so the fast path is not even asked: the full path refuses it
    assert status == 400 and used == []


async def test_signature_material_and_bodies_take_the_full_path(gw) -> None:
    plain = await gw.get(PATH, headers={"Host": "shop.test", **RID})
    ref = [(k, v) for k, v in plain.raw_headers if k.lower() != b"date"], await plain.read()
    for extra in (
        {"Signature-Input": 'sig1=("@method");created=1;keyid="k"', "Signature": "sig1=:AAAA:"},
        {"Signature": "sig1=:AAAA:"},
        {"Accept-Signature": 'sig1=("@status");keyid="k"'},
    ):
        (status, headers, body), used = await _same_both_ways(gw, "GET", {"Host": "shop.test", **extra})
        assert used == [0], extra  # declined: the signature middleware sees it (exempt path: same answer)
        assert status == 200 and (headers, body) == ref, extra
    (status, _, _), used = await _same_both_ways(gw, "GET", {"Host": "shop.test"}, data=b"x" * 10)
    assert status == 200 and used == [0]  # a body: the signature middleware reads it first


async def test_a_non_exempt_well_known_is_verified_again(gw) -> None:
    await gw.get(PATH, headers={"Host": "shop.test"})  # cached
    gw.settings.httpsig_exempt_prefixes = tuple(p for p in gw.settings.httpsig_exempt_prefixes if p != "/.well-known/")
    (status, _, body), used = await _same_both_ways(gw, "GET", {"Host": "shop.test"})
    assert status == 401 and used == [0], body  # the company's policy (required) applies again


async def test_every_answer_carries_the_same_headers_both_ways(gw) -> None:
    """200, 304 and the error answers (405, 404, %00): same status, headers (Server, Request-Id,
    Allow ...) and body with the fast path on or off; errors are declined and stay spec-shaped."""
    first = await gw.get(PATH, headers={"Host": "shop.test"})
    etag = first.headers["ETag"]
    for method, path, extra, want, asked in (
        ("GET", PATH, {}, 200, [200]),
        ("GET", PATH, {"If-None-Match": etag}, 304, [304]),
        ("GET", PATH, {"If-None-Match": "*"}, 304, [304]),
        ("HEAD", PATH, {"If-None-Match": '"other"'}, 200, [200]),
        ("POST", PATH, {}, 405, []),  # the router did not match well_known_ucp: not asked
        ("DELETE", PATH, {}, 405, []),
        ("GET", PATH + "?x=%00", {}, 400, []),  # refused before the fast path is asked
        ("GET", URL("/.well-known%2Fucp", encoded=True), {}, 404, []),  # path decodes to PATH, route does not
    ):
        (status, headers, body), used = await _same_both_ways(gw, method, {"Host": "shop.test", **extra}, path=path)
        assert (status, used) == (want, asked), (method, path, extra)
        named = dict(headers)
        assert named[b"Server"] == b"ucp-gateway" and named[b"Request-Id"] == RID["Request-Id"].encode()
        if status >= 400:
            assert body.startswith(b'{"code":"') and named[b"Content-Type"].startswith(b"application/json")
        if status == 405:
            assert named[b"Allow"] == b"GET,HEAD"


async def test_a_host_cache_miss_resolves_first_and_still_answers_fast(gw) -> None:
    await gw.get(PATH, headers={"Host": "shop.test"})  # profile rendered and cached
    gw.server.app[HOST_CACHE].clear()
    (status, headers, body), used = await _same_both_ways(gw, "GET", {"Host": "shop.test"})
    assert status == 200 and used == [200]  # the full path resolved the Host, then asked the fast path
    gw.server.app[HOST_CACHE].clear()
    full = await _wire(gw, "GET", {"Host": "shop.test"}, fast=False)
    assert full == (status, headers, body)


async def test_a_failing_fast_path_is_a_decline(gw) -> None:
    """A fault in a fast path never becomes the answer: the handler answers, as without it."""
    ref = await _wire(gw, "GET", {"Host": "shop.test"}, fast=False)

    def broken(request, host):
        raise RuntimeError("bug")

    app = gw.server.app
    saved = app[PUBLIC_FAST_PATHS][PATH]
    app[PUBLIC_FAST_PATHS][PATH] = PublicPath(saved.handler, broken)
    try:
        for clear in (False, True):  # quick branch (host cached) and full branch (host resolved first)
            if clear:
                app[HOST_CACHE].clear()
            resp = await gw.get(PATH, headers={"Host": "shop.test", **RID})
            got = resp.status, [(k, v) for k, v in resp.raw_headers if k.lower() != b"date"], await resp.read()
            assert got == ref
    finally:
        app[PUBLIC_FAST_PATHS][PATH] = saved


@pytest.mark.parametrize("level", ["warning", "info"])
async def test_fast_answers_with_and_without_the_access_log(aiohttp_client, database, db_settings, level) -> None:
    """Production runs at warning (no access-log work on the fast answer); at info the fast answer
    is logged like any other, with its request id."""
    await create_company(database.pool, slug="shop", display_name="Shop", hostnames=["shop.test"])
    with json_logs(db_settings, level) as (settings, stream):
        app = create_app(settings, clock=FrozenClock(), database=database)
        assert app[FOUNDATION].log_on is (level == "info")
        client = await _counting_client(aiohttp_client, app)
        await client.get(PATH, headers={"Host": "shop.test"})
        (status, headers, _), used = await _same_both_ways(client, "GET", {"Host": "shop.test"})
        assert status == 200 and used == [200] and dict(headers)[b"Server"] == b"ucp-gateway"
        lines = [line for line in stream.getvalue().splitlines() if '"event": "request"' in line]
        if level == "info":
            assert len(lines) == 3 and all('"request_id": "fast-path-test-1"' in line for line in lines[1:])
            assert all('"status": 200' in line for line in lines)
        else:
            assert lines == []

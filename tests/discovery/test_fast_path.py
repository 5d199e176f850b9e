"""``/.well-known/ucp`` answered from the foundation layer (``app[PUBLIC_FAST_PATHS]``): the same bytes
as the full middleware path, and only for requests the trust and signature middlewares would not touch."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from ucp_gateway.app import create_app
from ucp_gateway.clock import FrozenClock
from ucp_gateway.middleware import PUBLIC_FAST_PATHS
from ucp_gateway.tenancy import create_company

PATH = "/.well-known/ucp"
RID = {"Request-Id": "fast-path-test-1"}


@pytest.fixture
async def gw(aiohttp_client, database, db_settings):
    """The real app (create_app) with the fast path counted: ``answered`` lists what it answered."""
    await create_company(database.pool, slug="shop", display_name="Shop", hostnames=["shop.test"])
    app = create_app(db_settings, clock=FrozenClock(), database=database)
    answered: list[int] = []
    fast_path = app[PUBLIC_FAST_PATHS][PATH]  # discovery.web.public_fast_path(...)

    def counting(request):
        resp = fast_path(request)
        answered.append(0 if resp is None else resp.status)
        return resp

    app[PUBLIC_FAST_PATHS][PATH] = counting
    client = await aiohttp_client(app)
    client.answered = answered
    client.settings = db_settings
    return client


async def _wire(client, method: str, headers: dict[str, str], fast: bool, data: bytes | None = None):
    """(status, raw headers without Date, body) with the fast path on or off."""
    app = client.server.app
    saved = app[PUBLIC_FAST_PATHS].pop(PATH)
    if fast:
        app[PUBLIC_FAST_PATHS][PATH] = saved
    try:
        resp = await client.request(method, PATH, headers={**RID, **headers}, data=data, allow_redirects=False)
        body = await resp.read()
    finally:
        app[PUBLIC_FAST_PATHS][PATH] = saved
    return resp.status, [(k, v) for k, v in resp.raw_headers if k.lower() != b"date"], body


async def _same_both_ways(client, method: str, headers: dict[str, str], data: bytes | None = None):
    before = len(client.answered)
    full = await _wire(client, method, headers, fast=False, data=data)
    fast = await _wire(client, method, headers, fast=True, data=data)
    assert fast == full
    return fast, client.answered[before:]


async def test_fast_answer_is_byte_identical_to_the_full_path(gw) -> None:
    first = await gw.get(PATH, headers={"Host": "shop.test"})  # renders and caches the profile
    assert first.status == 200 and gw.answered == [0]  # nothing cached yet: the full path rendered it
    etag = first.headers["ETag"]
    (status, headers, body), used = await _same_both_ways(gw, "GET", {"Host": "shop.test"})
    assert status == 200 and used == [200] and body == await first.read()
    names = [k.lower() for k, _ in headers]
    assert names == [b"cache-control", b"etag", b"content-type", b"request-id", b"content-length", b"server"]
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


async def test_unknown_host_gets_the_platform_node_and_a_bad_host_the_full_path(gw) -> None:
    await gw.get(PATH, headers={"Host": "nobody.test"})  # platform node, rendered once
    (status, _, body), used = await _same_both_ways(gw, "GET", {"Host": "nobody.test"})
    assert status == 200 and used == [200] and b'"ucp"' in body
    (status, _, _), used = await _same_both_ways(gw, "GET", {"Host": "bad host"})
    assert status == 400 and used == [0]  # never cached: declined, the full path refuses it


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

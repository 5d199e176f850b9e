"""Profile fetcher against real local servers (UCP overview "Fetching")."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from ucp_gateway.discovery import (
    InvalidProfileUrl,
    ProfileFetcher,
    ProfileMalformed,
    ProfileUnreachable,
)

from .conftest import fetch_settings, new_jwk


@pytest.fixture
async def fetcher(clock):
    f = ProfileFetcher(fetch_settings(), clock=clock)
    yield f
    await f.close()


async def test_fetches_validates_and_caches(fetcher, platform_server) -> None:
    profile = await fetcher.get_profile(platform_server.url())
    assert profile.version == "2026-04-08"
    assert "dev.ucp.shopping.checkout" in profile.capabilities
    assert profile.key("k1")["kty"] == "EC"
    assert "d" not in profile.key("k1")
    await fetcher.get_profile(platform_server.url())
    assert platform_server.count() == 1


async def test_redirect_refused(fetcher, platform_server) -> None:
    with pytest.raises(ProfileUnreachable, match="redirect"):
        await fetcher.get_profile(platform_server.url("/redirect"))
    assert platform_server.count("/redirect") == 1
    assert platform_server.count("/profile") == 0  # the Location was never followed


async def test_slow_server_times_out(fetcher, platform_server) -> None:
    start = time.monotonic()
    with pytest.raises(ProfileUnreachable, match="timed out"):
        await fetcher.get_profile(platform_server.url("/slow"))
    assert time.monotonic() - start < 2.0  # read timeout 0.4 s, the server would take 5 s


async def test_oversized_body_cut_off(platform_server, clock) -> None:
    f = ProfileFetcher(fetch_settings(profile_fetch_max_bytes=128 * 1024), clock=clock)
    try:
        start = time.monotonic()
        with pytest.raises(ProfileMalformed, match="larger than 131072"):
            await f.get_profile(platform_server.url("/big"))
        assert time.monotonic() - start < 2.0
        with pytest.raises(ProfileMalformed, match="larger than"):
            await f.get_profile(platform_server.url("/big-declared"))
    finally:
        await f.close()


async def test_plain_http_refused_outside_dev_allowlist(platform_server, clock) -> None:
    for settings in (
        fetch_settings(dev_profile_hosts=[]),
        fetch_settings(dev_profile_hosts=["localhost"]),
        fetch_settings(environment="production"),  # the allowlist is ignored outside development
    ):
        f = ProfileFetcher(settings, clock=clock)
        try:
            with pytest.raises(InvalidProfileUrl, match="https"):
                await f.get_profile(platform_server.url())
        finally:
            await f.close()
    assert platform_server.count() == 0


async def test_hostname_resolving_to_private_address_refused(platform_server, clock) -> None:
    answers = {
        "internal.test": ["10.0.0.7"],
        "metadata.test": ["169.254.169.254"],
        "mixed.test": ["93.184.216.34", "192.168.1.1"],
        "rebind.test": ["127.0.0.1"],
        "mapped.test": ["::ffff:10.0.0.1"],
        "localhost": ["127.0.0.1"],
    }
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[host]

    f = ProfileFetcher(fetch_settings(), clock=clock, resolver=resolver)
    try:
        for host in ("internal.test", "metadata.test", "mixed.test", "mapped.test"):
            with pytest.raises(InvalidProfileUrl, match="special-use"):
                await f.get_profile(f"https://{host}/profile")
        # resolves to loopback, where a real server listens: refused since the host is not allowlisted
        with pytest.raises(InvalidProfileUrl, match="special-use"):
            await f.get_profile(f"https://rebind.test:{platform_server.port}/profile")
        for literal in ("169.254.169.254", "10.1.2.3", "[::1]", "[fd00::1]"):
            with pytest.raises(InvalidProfileUrl, match="special-use"):
                await f.get_profile(f"https://{literal}/profile")
        assert platform_server.count() == 0
        # an allowlisted name goes through the same resolver and connects to the address it checked
        profile = await f.get_profile(f"http://localhost:{platform_server.port}/profile")
        assert profile.key("k1") is not None
        assert platform_server.count() == 1
        assert "localhost" in asked and "rebind.test" in asked
    finally:
        await f.close()


async def test_hundred_concurrent_requests_cause_one_fetch(fetcher, platform_server) -> None:
    platform_server.delay = 0.2
    results = await asyncio.gather(*(fetcher.get_profile(platform_server.url()) for _ in range(100)))
    assert platform_server.count() == 1
    assert all(r is results[0] for r in results)
    assert fetcher.fetch_count == 1


async def test_concurrent_failure_is_shared_too(fetcher, platform_server) -> None:
    platform_server.fail = True
    platform_server.delay = 0.1
    results = await asyncio.gather(
        *(fetcher.get_profile(platform_server.url()) for _ in range(20)), return_exceptions=True
    )
    assert all(isinstance(r, ProfileUnreachable) for r in results)
    assert platform_server.count() == 1


async def test_unknown_kid_refresh_is_throttled_per_origin(fetcher, platform_server, clock) -> None:
    platform_server.cache_control = "public, max-age=3600"
    url, other = platform_server.url(), platform_server.url("/other")
    assert (await fetcher.resolve(url, "k1"))["kid"] == "k1"
    assert platform_server.count() == 1
    # the platform rotates in k2: an unknown kid forces one refresh, which finds it
    platform_server.keys.append(new_jwk("k2"))
    assert (await fetcher.resolve(url, "k2"))["kid"] == "k2"
    assert platform_server.count() == 2
    # further unknown kids within the TTL floor do not refetch, not even another URL on the same origin
    for _ in range(5):
        assert await fetcher.resolve(url, "nope") is None
    await fetcher.get_profile(other)  # first fetch of /other (not a refresh)
    assert await fetcher.resolve(other, "nope") is None
    assert platform_server.count() == 2 and platform_server.count("/other") == 1
    assert await fetcher.resolve(url, "nope", force_refresh=True) is None
    assert platform_server.count() == 2
    clock.advance(61)
    assert await fetcher.resolve(url, "nope") is None
    assert platform_server.count() == 3


async def test_failing_refresh_keeps_cached_copy(fetcher, platform_server, clock) -> None:
    url = platform_server.url()
    good = await fetcher.get_profile(url)
    platform_server.fail = True
    assert await fetcher.resolve(url, "unknown") is None  # forced refresh fails ...
    assert platform_server.count() == 2
    assert (await fetcher.resolve(url, "k1"))["kid"] == "k1"  # ... the cached copy still answers
    assert await fetcher.get_profile(url) is good
    clock.advance(90)  # past the 60 s TTL: the refresh fails, the copy is served (stale-if-error)
    assert await fetcher.get_profile(url) is good
    assert fetcher.cached(url) is good
    clock.advance(400)  # past the stale-if-error window (300 s): the failure surfaces
    with pytest.raises(ProfileUnreachable):
        await fetcher.get_profile(url)
    assert fetcher.cached(url) is good  # never evicted by a failure
    platform_server.fail = False
    clock.advance(120)  # past the backoff
    assert (await fetcher.get_profile(url)).key("k1") is not None


async def test_backoff_after_failures(fetcher, platform_server, clock) -> None:
    platform_server.fail = True
    url = platform_server.url()
    with pytest.raises(ProfileUnreachable):
        await fetcher.get_profile(url)
    with pytest.raises(ProfileUnreachable, match="retrying later"):
        await fetcher.get_profile(url)
    assert platform_server.count() == 1
    clock.advance(1.1)  # base backoff 1 s
    with pytest.raises(ProfileUnreachable):
        await fetcher.get_profile(url)
    assert platform_server.count() == 2
    clock.advance(1.1)  # second failure doubled the wait to 2 s
    with pytest.raises(ProfileUnreachable, match="retrying later"):
        await fetcher.get_profile(url)
    assert platform_server.count() == 2
    platform_server.fail = False
    clock.advance(1.0)
    assert (await fetcher.get_profile(url)).version == "2026-04-08"


async def test_failures_are_remembered_in_bounded_memory(platform_server, clock) -> None:
    """Regression (security review): every failed URL was kept for ever, with its exception and
    traceback (about 5.7 kB each), so a caller naming new profile URLs grew the gateway's memory
    without bound. Failures are now an LRU as large as the cache, holding class and message only."""
    f = ProfileFetcher(fetch_settings(profile_cache_size=4), clock=clock)
    try:
        platform_server.fail = True
        for i in range(10):
            with pytest.raises(ProfileUnreachable):
                await f.get_profile(platform_server.url(f"/p{i}"))
        assert list(f._flights.failures) == [platform_server.url(f"/p{i}") for i in range(6, 10)]  # the newest four
        assert not any(
            isinstance(getattr(x, n), BaseException) for x in f._flights.failures.values() for n in x.__slots__
        )
        # a remembered failure still backs off, with the same error class and message
        fetches = f.fetch_count
        with pytest.raises(ProfileUnreachable, match="retrying later"):
            await f.get_profile(platform_server.url("/p9"))
        assert f.fetch_count == fetches
        fetches = f.fetch_count
        with pytest.raises(ProfileUnreachable):  # forgotten: fetched again (its backoff restarts)
            await f.get_profile(platform_server.url("/p0"))
        assert f.fetch_count == fetches + 1
    finally:
        await f.close()


async def test_ttl_floor_and_longer_cache_control(fetcher, platform_server, clock) -> None:
    platform_server.cache_control = "no-store"
    url = platform_server.url()
    await fetcher.get_profile(url)
    clock.advance(59)
    await fetcher.get_profile(url)
    assert platform_server.count() == 1  # no-store still cached for the 60 s floor
    clock.advance(2)
    platform_server.cache_control = "public, max-age=600"
    await fetcher.get_profile(url)
    assert platform_server.count() == 2
    clock.advance(500)
    await fetcher.get_profile(url)
    assert platform_server.count() == 2  # the longer max-age is honoured
    clock.advance(101)
    await fetcher.get_profile(url)
    assert platform_server.count() == 3


async def test_conditional_refresh_with_etag(fetcher, platform_server, clock) -> None:
    platform_server.etag = '"v1"'
    url = platform_server.url()
    first = await fetcher.get_profile(url)
    clock.advance(61)
    assert await fetcher.get_profile(url) is first  # 304 Not Modified reuses the copy
    assert platform_server.count() == 2


async def test_lru_capacity(platform_server, clock) -> None:
    f = ProfileFetcher(fetch_settings(profile_cache_size=2), clock=clock)
    try:
        for path in ("/profile", "/other", "/third"):
            await f.get_profile(platform_server.url(path))
        assert f.cached(platform_server.url("/profile")) is None
        assert f.cached(platform_server.url("/third")) is not None
        await f.get_profile(platform_server.url("/profile"))
        assert platform_server.count("/profile") == 2
    finally:
        await f.close()


@pytest.mark.parametrize(
    ("path", "match"),
    [("/text", "not JSON"), ("/invalid", "platform schema"), ("/private", "public keys only")],
)
async def test_malformed_profiles(fetcher, platform_server, path, match) -> None:
    with pytest.raises(ProfileMalformed, match=match) as info:
        await fetcher.get_profile(platform_server.url(path))
    assert (info.value.code, info.value.http_status) == ("profile_malformed", 422)


async def test_error_statuses_and_unreachable(fetcher, platform_server) -> None:
    platform_server.fail = True
    with pytest.raises(ProfileUnreachable) as info:
        await fetcher.get_profile(platform_server.url())
    assert (info.value.code, info.value.http_status) == ("profile_unreachable", 424)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    closed = f"http://127.0.0.1:{port}/profile"
    with pytest.raises(ProfileUnreachable):
        await fetcher.get_profile(closed)

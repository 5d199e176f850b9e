"""The outbound URL policy (discovery/ssrf.py): one set of rules for profile fetches and order webhooks."""

from __future__ import annotations

import asyncio

import pytest

from ucp_gateway.discovery import InvalidProfileUrl, ProfileFetcher, ProfileMalformed, ProfileUnreachable
from ucp_gateway.discovery.ssrf import RefusedUrl, check_target, dev_allowlist

from .conftest import fetch_settings

DEV = frozenset({"127.0.0.1", "localhost"})


@pytest.mark.parametrize(
    ("url", "dev_hosts", "reason"),
    [
        ("", DEV, "empty or too long"),
        ("https://x.example/" + "a" * 2100, DEV, "empty or too long"),
        ("https://x.example:99999/", DEV, "cannot be parsed"),
        ("https://[::1/", DEV, "cannot be parsed"),
        ("https:///hook", DEV, "no host"),
        ("https://user:pw@x.example/hook", DEV, "credentials"),
        ("https://token@x.example/hook", DEV, "credentials"),
        ("http://x.example/hook", DEV, "must use https"),
        ("ftp://x.example/hook", DEV, "must use https"),
        ("http://127.0.0.1/hook", frozenset(), "must use https"),  # not allowlisted (or not development)
        ("https://127.0.0.1/hook", frozenset(), "special-use"),
        ("https://169.254.169.254/latest/meta-data/", DEV, "special-use"),
        ("https://10.1.2.3/hook", DEV, "special-use"),
        ("https://[::1]/hook", DEV, "special-use"),
        ("https://[::ffff:127.0.0.1]/hook", frozenset(), "special-use"),
        # regression (review): ::/8 forms that is_global lets through, translatable to internal IPv4
        ("https://[::127.0.0.1]/hook", frozenset(), "special-use"),  # IPv4-compatible
        ("https://[::a9fe:a9fe]/hook", frozenset(), "special-use"),
        ("https://[::ffff:0:7f00:1]/hook", frozenset(), "special-use"),  # SIIT
        ("https://[64:ff9b:1::a9fe:a9fe]/hook", frozenset(), "special-use"),  # local NAT64 (RFC 8215)
        ("https://[::8.8.8.8]/hook", frozenset(), "special-use"),  # reserved whatever it embeds
        ("https://[fe80::1%25eth0]/hook", DEV, "special-use"),
        ("https://0177.0.0.1/hook", DEV, "special-use"),  # not canonical: never an address we accept
        # yarl (aiohttp's parser) folds Unicode digits and dots into an IPv4 literal that aiohttp
        # connects to without resolving; the standard library sees a name
        ("https://①②⑦.0.0.1/hook", frozenset(), "special-use"),
        ("https://169。254。169。254/latest/meta-data/", DEV, "special-use"),
    ],
)
def test_refused_targets_say_why_without_the_url(url, dev_hosts, reason):
    with pytest.raises(RefusedUrl, match=reason) as info:
        check_target(url, dev_hosts=dev_hosts, what="webhook")
    assert str(info.value).startswith("webhook ")
    assert "pw" not in str(info.value) and "token" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "dev_hosts"),
    [
        ("https://platform.example/hooks?t=1", frozenset()),
        ("https://93.184.216.34/hook", frozenset()),
        ("https://[64:ff9b::5db8:d822]/hook", frozenset()),  # well-known NAT64 of 93.184.216.34
        ("https://[2606:2800:220:1:248:1893:25c8:1946]/hook", frozenset()),
        ("http://127.0.0.1:8284/webhooks", DEV),  # the conformance suite's receiver
        ("http://localhost:8284/webhooks", DEV),
        ("https://localhost/hook", frozenset()),  # a name: judged at connect time by GuardedResolver
    ],
)
def test_accepted_targets(url, dev_hosts):
    assert check_target(url, dev_hosts=dev_hosts) == url


def test_dev_allowlist_only_in_development():
    assert dev_allowlist(fetch_settings(dev_profile_hosts=["LocalHost"])) == {"localhost"}
    assert dev_allowlist(fetch_settings(environment="production", dev_profile_hosts=["localhost"])) == frozenset()


async def test_unicode_spelt_loopback_literal_never_connects(clock):
    """Regression: ``https://①②⑦.0.0.1:port/`` passed the literal check (the standard library reads a
    name) and aiohttp connected straight to 127.0.0.1 (yarl folds it into the literal)."""
    hits: list[int] = []

    async def accept(reader, writer):
        hits.append(1)
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    f = ProfileFetcher(fetch_settings(dev_profile_hosts=[]), clock=clock)
    try:
        for host in ("127.0.0.1", "①②⑦.0.0.1", "127。0。0。1", "[::ffff:127.0.0.1]"):
            with pytest.raises(InvalidProfileUrl, match="special-use"):
                await f.get_profile(f"https://{host}:{port}/profile")
        assert hits == []
    finally:
        await f.close()
        server.close()
        await server.wait_closed()


async def test_fetch_document_reads_json_the_schema_refuses_under_the_same_rules(platform_server, clock):
    f = ProfileFetcher(fetch_settings(profile_fetch_max_bytes=128 * 1024), clock=clock)
    try:
        doc = await f.fetch_document(platform_server.url("/invalid"))  # get_profile: 422
        assert doc == {"ucp": {"version": "draft", "capabilities": {}}}
        with pytest.raises(ProfileUnreachable, match="redirect"):
            await f.fetch_document(platform_server.url("/redirect"))
        assert platform_server.count("/profile") == 0
        with pytest.raises(ProfileMalformed, match="larger than"):
            await f.fetch_document(platform_server.url("/big-declared"))
        with pytest.raises(ProfileMalformed, match="not JSON"):
            await f.fetch_document(platform_server.url("/text"))
        with pytest.raises(ProfileMalformed, match="not JSON"):  # read as every inbound body (loads_strict)
            await f.fetch_document(platform_server.url("/repeated"))
        platform_server.fail = True
        with pytest.raises(ProfileUnreachable, match="HTTP 503"):
            await f.fetch_document(platform_server.url())
    finally:
        await f.close()
    # outside the allowlist: refused before any request
    f = ProfileFetcher(fetch_settings(dev_profile_hosts=["localhost"]), clock=clock)
    try:
        with pytest.raises(InvalidProfileUrl, match="https"):
            await f.fetch_document(platform_server.url())
        with pytest.raises(InvalidProfileUrl, match="special-use"):
            await f.fetch_document(f"https://127.0.0.1:{platform_server.port}/profile")
    finally:
        await f.close()
    assert platform_server.count() == 1  # the 503 only

"""The Web Bot Auth key-directory cache against a real directory on loopback, under a frozen clock:
an outage backs off and serves the stale copy; a failure is remembered as class and message only."""

from __future__ import annotations

import pytest

from tests.access.wba import AgentHost, Bot
from ucp_gateway.access.wba_directory import DIRECTORY_PATH, DirectoryFetcher, DirectoryUnavailable
from ucp_gateway.clock import FrozenClock
from ucp_gateway.config import Settings
from ucp_gateway.keys.rfc7638 import thumbprint


@pytest.fixture
async def directory():
    bot = Bot("Ed25519")
    host = await AgentHost([bot.jwk]).start()
    clock = FrozenClock()
    settings = Settings(environment="development", dev_profile_hosts=["127.0.0.1"])
    fetcher = DirectoryFetcher(settings, clock=clock)
    try:
        yield host, bot, clock, fetcher, settings
    finally:
        await fetcher.close()
        await host.runner.cleanup()


async def test_an_outage_backs_off_and_serves_the_stale_copy(directory):
    host, bot, clock, fetcher, settings = directory
    url, kid = host.base + DIRECTORY_PATH, thumbprint(bot.jwk)
    assert (await fetcher.key(url, kid))["x"] == bot.jwk["x"]
    clock.advance(300 + 1)  # past the directory's max-age
    host.directory_status = 503
    assert (await fetcher.key(url, kid))["x"] == bot.jwk["x"]  # stale, within profile_stale_if_error
    assert (await fetcher.key(url, kid))["x"] == bot.jwk["x"]  # and in the backoff, without a fetch
    assert host.directory_hits == 2
    clock.advance(settings.profile_stale_if_error)
    with pytest.raises(DirectoryUnavailable, match="HTTP 503"):  # too stale: the outage shows
        await fetcher.key(url, kid)
    assert host.directory_hits == 3


async def test_a_failure_is_remembered_without_its_exception(directory):
    """Regression: the directory cache kept each failure's exception, and with it its traceback
    and frames, for as long as the URL stayed in its backoff table (the profile fetcher's leak)."""
    host, bot, clock, fetcher, settings = directory
    url = host.base + DIRECTORY_PATH
    host.directory_status = 503
    with pytest.raises(DirectoryUnavailable, match="HTTP 503"):
        await fetcher.key(url, thumbprint(bot.jwk))
    failures = fetcher._flights.failures
    assert list(failures) == [url]
    assert not any(isinstance(getattr(x, n), BaseException) for x in failures.values() for n in x.__slots__)
    with pytest.raises(DirectoryUnavailable, match=r"HTTP 503 \(retrying later\)"):
        await fetcher.key(url, thumbprint(bot.jwk))
    assert host.directory_hits == 1
    clock.advance(settings.profile_fetch_backoff_base)
    host.directory_status = 200
    assert await fetcher.key(url, thumbprint(bot.jwk)) is not None
    assert not failures

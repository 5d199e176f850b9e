"""A real headless browser for the pages people use: Debian's ``chromium`` driven by its
``chromium-driver`` through Selenium (``.ci/run`` installs both when they are missing).

Without the browser these tests skip on a developer's machine and fail in CI (``CI`` set), so a CI
run can never pass them by not running them. Selenium's calls block, so :class:`Browser` runs each
one in a thread: the gateway under test serves on this test's own event loop. Screenshots go to
``test-artifacts/`` (``UCPGW_TEST_ARTIFACTS`` overrides; git-ignored).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

import pytest

from ..commerce.conftest import clock, company, platform  # noqa: F401 - fixtures the pages' tests share

ARTIFACTS = Path(os.environ.get("UCPGW_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / "test-artifacts")


def _binaries() -> tuple[str | None, str | None]:
    browser = os.environ.get("UCPGW_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("UCPGW_CHROMEDRIVER") or shutil.which("chromedriver")
    return browser, driver


@pytest.fixture(scope="session")
def webdriver_session():
    browser, driver = _binaries()
    if not browser or not driver:
        msg = "browser tests need Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(msg + ": missing in CI")
        pytest.skip(msg)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        "--no-first-run",
        "--window-size=1000,1100",
    ):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    drv.set_page_load_timeout(30)
    try:
        yield drv
    finally:
        drv.quit()


class Browser:
    """Async wrapper over one Selenium driver: every call runs in a worker thread."""

    def __init__(self, driver, base: str):
        self.driver, self.base = driver, base

    async def _run(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    async def get(self, path: str) -> None:
        await self._run(self.driver.get, self.base + path)

    async def find(self, css: str):
        from selenium.webdriver.common.by import By

        return await self._run(self.driver.find_element, By.CSS_SELECTOR, css)

    async def find_all(self, css: str) -> list:
        from selenium.webdriver.common.by import By

        return await self._run(self.driver.find_elements, By.CSS_SELECTOR, css)

    async def click(self, css: str) -> None:
        el = await self.find(css)
        await self._run(el.click)

    async def type(self, css: str, text: str) -> None:
        el = await self.find(css)
        await self._run(el.clear)
        await self._run(el.send_keys, text)

    async def submit(self, css: str, expect_path: str, timeout: float = 15, prefix: bool = False) -> None:
        """Click ``css`` and wait until the browser shows ``expect_path`` (path and query; with
        ``prefix``, a URL that starts with it)."""
        from selenium.webdriver.support.ui import WebDriverWait

        el = await self.find(css)
        await self._run(el.click)

        def arrived(d) -> bool:
            here = d.current_url[len(self.base) :] if d.current_url.startswith(self.base) else None
            return here is not None and (here.startswith(expect_path) if prefix else here == expect_path)

        await self._run(lambda: WebDriverWait(self.driver, timeout).until(arrived))

    async def css(self, css: str, prop: str) -> str:
        el = await self.find(css)
        return await self._run(el.value_of_css_property, prop)

    async def value(self, css: str) -> str:
        el = await self.find(css)
        return await self._run(el.get_attribute, "value")

    async def text(self, css: str = "main") -> str:
        el = await self.find(css)
        return await self._run(lambda: el.text)

    async def source(self) -> str:
        return await self._run(lambda: self.driver.page_source)

    async def url(self) -> str:
        return await self._run(lambda: self.driver.current_url)

    async def cookies(self) -> dict[str, str]:
        return {c["name"]: c["value"] for c in await self._run(self.driver.get_cookies)}

    async def screenshot(self, name: str) -> Path:
        """Save a full-window PNG under test-artifacts/ and return its path."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".png")
        ok = await self._run(self.driver.save_screenshot, str(path))
        assert ok and path.stat().st_size > 0, path
        return path


@pytest.fixture
def browser_for(webdriver_session):
    """``browser_for(client)``: a :class:`Browser` on the aiohttp test client's server, cookies cleared."""

    def make(client) -> Browser:
        webdriver_session.execute_cdp_cmd("Network.clearBrowserCookies", {})  # cookies ignore ports
        return Browser(webdriver_session, str(client.make_url("")).rstrip("/"))

    return make

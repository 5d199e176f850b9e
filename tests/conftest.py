"""Test fixtures: a real PostgreSQL for the whole session, a fresh migrated database per test.

With ``DATABASE_URL`` set, tests run against that server (its user must be able to create databases
and roles); otherwise one embedded PostgreSQL (pgserver) is started in a temporary directory.
Each test that asks for ``database`` gets its own database cloned from a migrated template; the
next test's clone is made while a test runs and a used one is dropped in the background
(:class:`_Clones`), so a test waits for neither (a clone and a drop took ~0.3 s of each test).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import structlog

from ucp_gateway.config import Settings
from ucp_gateway.db import Database
from ucp_gateway.db.database import connect_database
from ucp_gateway.db.dsn import with_database
from ucp_gateway.db.embedded import start_embedded, stop_embedded
from ucp_gateway.db.migrate import apply_migrations

_TEMPLATE = f"ucpgw_tpl_{os.getpid()}"
_OWN_BASETEMP: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Give each run a base temp directory of its own outside ``/tmp/pytest-of-<user>``. As root,
    pgserver runs PostgreSQL as the user ``pgserver`` and opens the directories above its data
    directory to it (g+rx, o+rx); every pytest start resets ``/tmp/pytest-of-<user>`` to 0700, so
    a second test run on the same machine cut the first one's servers off their data and sockets."""
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        path = tempfile.mkdtemp(prefix="ucpgw-pytest-")
        _OWN_BASETEMP.append(path)
        config.option.basetemp = path


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _OWN_BASETEMP:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Each test leaves logging as it found it. A test that runs the CLI configures structlog and the
    root logger onto the stream of the moment (capsys's, closed after the test), and later tests
    then failed with "I/O operation on closed file" wherever they logged."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
async def pg_base_dsn(tmp_path_factory) -> AsyncIterator[str]:
    """Owner DSN of the test cluster (``postgres`` database or the DATABASE_URL database)."""
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
        return
    server, dsn = await start_embedded(tmp_path_factory.mktemp("pg"))
    try:
        yield dsn
    finally:
        await stop_embedded(server)


@pytest.fixture(scope="session")
async def template_db(pg_base_dsn) -> AsyncIterator[str]:
    """Name of a database with every migration applied, used as CREATE DATABASE ... TEMPLATE."""
    conn = await asyncpg.connect(pg_base_dsn)
    await conn.execute(f'DROP DATABASE IF EXISTS "{_TEMPLATE}"')
    await conn.execute(f'CREATE DATABASE "{_TEMPLATE}"')
    tconn = await asyncpg.connect(with_database(pg_base_dsn, _TEMPLATE))
    try:
        await apply_migrations(tconn)
    finally:
        await tconn.close()
    try:
        yield _TEMPLATE
    finally:
        await conn.execute(f'DROP DATABASE IF EXISTS "{_TEMPLATE}" WITH (FORCE)')
        await conn.close()


async def _new_db(base_dsn: str, template: str) -> str:
    name = f"ucpgw_t_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(base_dsn)
    try:
        for attempt in range(20):  # the template may be briefly in use by a concurrent clone
            try:
                await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                break
            except asyncpg.ObjectInUseError:
                await asyncio.sleep(0.05 * (attempt + 1))
        else:  # never a name of a database that does not exist
            raise RuntimeError(f"could not clone {template}: still in use after 20 tries")
    finally:
        await conn.close()
    return name


async def _drop_db(base_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(base_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


class _Clones:
    """Fresh databases cloned from a template one test ahead: :meth:`take` hands out the clone made
    meanwhile (or makes one) and starts the next; :meth:`give_back` drops a used one in the
    background. Each test still gets a database nobody used before; only the waiting moves."""

    def __init__(self, base_dsn: str) -> None:
        self.base_dsn = base_dsn
        self.ahead: dict[str, asyncio.Task[str]] = {}  # template -> the next test's clone
        self.drops: set[asyncio.Task[None]] = set()

    async def take(self, template: str) -> str:
        task = self.ahead.pop(template, None)
        name = None
        if task is not None:
            with contextlib.suppress(Exception):  # a failed clone ahead: make one now, failing loudly
                name = await task
        if name is None:
            name = await _new_db(self.base_dsn, template)
        self.ahead[template] = asyncio.create_task(_new_db(self.base_dsn, template))
        return name

    def give_back(self, name: str) -> None:
        task = asyncio.create_task(_drop_db(self.base_dsn, name))
        self.drops.add(task)
        task.add_done_callback(self.drops.discard)

    async def close(self) -> None:
        for task in self.ahead.values():
            with contextlib.suppress(Exception):
                self.give_back(await task)
        self.ahead.clear()
        await asyncio.gather(*self.drops, return_exceptions=True)


@pytest.fixture(scope="session")
async def _clones(pg_base_dsn) -> AsyncIterator[_Clones]:
    clones = _Clones(pg_base_dsn)
    try:
        yield clones
    finally:
        await clones.close()


@pytest.fixture
async def db_settings(pg_base_dsn, template_db, _clones, tmp_path) -> AsyncIterator[Settings]:
    """Settings pointing at a fresh, migrated database of its own (dropped afterwards)."""
    name = await _clones.take(template_db)
    try:
        yield Settings(
            database_url=with_database(pg_base_dsn, name),
            data_dir=tmp_path / "data",
            keys_dir=tmp_path / "data" / "keys",  # the test's own dev KEK ring, never the repo's keys/
            environment="development",
            log_level="warning",
            platform_hosts=("platform.test",),  # the tests' platform node; any other unbound Host is a 404
        )
    finally:
        _clones.give_back(name)


@pytest.fixture
async def database(db_settings) -> AsyncIterator[Database]:
    """An opened :class:`Database` (app-role pool) on a fresh database."""
    db = await connect_database(db_settings)
    try:
        yield db
    finally:
        await db.close()

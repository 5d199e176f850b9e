"""A real gateway on a real socket: foundation app + verbs runtime + transports, flower-shop seeded."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiohttp import web

from tests.verbs.conftest import T0, load_catalog
from ucp_gateway.app import create_app
from ucp_gateway.clock import FrozenClock
from ucp_gateway.tenancy import create_company
from ucp_gateway.transports import web as tx_web
from ucp_gateway.verbs import web as verbs_web
from ucp_gateway.verbs.auth import issue_staff_token
from ucp_gateway.verbs.demo import seed_verb_demo


@dataclass
class Gateway:
    url: str  # http://127.0.0.1:PORT
    app: web.Application
    company: object
    tokens: dict[str, str]  # role -> staff bearer token
    clock: FrozenClock
    pool: object


@pytest.fixture
async def gateway(database, db_settings):
    db_settings.dev_profile_hosts = ["127.0.0.1"]  # test agents publish their profiles on loopback http
    db_settings.webhook_worker = False
    db_settings.host_cache_ttl = 0  # tests change company settings between calls
    clock = FrozenClock(T0)
    company = await create_company(database.pool, slug="flower-shop", display_name="Flower Shop",
                                   hostnames=["127.0.0.1", "localhost"], tier="growth",
                                   signature_policy="optional")  # fmt: skip
    await load_catalog(database.pool, company.id)
    await seed_verb_demo(database.pool, company.id, T0)
    tokens = {r: await issue_staff_token(database.pool, company.id, r, f"{r}-user")
              for r in ("read_only", "employee", "admin", "owner")}  # fmt: skip
    app = create_app(db_settings, clock=clock, database=database)
    if verbs_web.VERBS not in app:  # COMPONENTS normally wires both
        verbs_web.setup(app)
        tx_web.setup(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield Gateway(f"http://127.0.0.1:{port}", app, company, tokens, clock, database.pool)
    finally:
        await runner.cleanup()

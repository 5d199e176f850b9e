from __future__ import annotations

import pytest

from ucp_gateway.clock import FrozenClock
from ucp_gateway.keys import KekRing, Vault, attach_vault
from ucp_gateway.tenancy import create_company


@pytest.fixture
def clock():
    return FrozenClock()


@pytest.fixture
def vault(database):
    v = Vault(KekRing.parse(KekRing.new_entry("kek-1")))
    attach_vault(database.pool, v)
    return v


@pytest.fixture
async def two_companies(database):
    a = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    b = await create_company(database.pool, slug="bolt", display_name="Bolt", hostnames=["bolt.example"])
    return a, b

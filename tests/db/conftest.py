"""Fixtures of the database layer's tests."""

from __future__ import annotations

import pytest

from ucp_gateway.db.database import connect_database


@pytest.fixture
async def one_conn_db(db_settings):
    """A Database whose pool has exactly one connection: every acquire gets the same session."""
    db = await connect_database(db_settings.model_copy(update={"db_pool_min": 1, "db_pool_max": 1}))
    try:
        yield db
    finally:
        await db.close()

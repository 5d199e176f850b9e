"""A new company's first signing key, created with the company rather than up to a scheduler
interval later (otherwise its ``/.well-known/ucp`` would publish no key, under ``max-age``)."""

from __future__ import annotations

import datetime as dt
from uuid import UUID

from ..config import Settings
from ..db import Database
from ..errors import ConfigError
from .repository import ensure_active_key
from .vault import Vault, attach_vault, vault_of

__all__ = ["bootstrap_company_key"]


async def bootstrap_company_key(db: Database, settings: Settings, company_id: UUID, *, now: dt.datetime) -> str | None:
    """Give ``company_id`` an active key if it has none (idempotent).

    Uses the KEK vault already attached to ``db.pool`` (the running app), else loads the ring from
    settings (a configured ring, or the generated dev ring in development) and attaches it.
    Returns: the active kid, or None when no KEK ring is configured (production without
    ``UCPGW_KEK_RING``/``UCPGW_KEK_FILE``): the scheduler creates the key once one is.
    """
    if vault_of(db.pool) is None:
        from .web import load_ring  # the settings -> ring loader used at app startup

        try:
            attach_vault(db.pool, Vault(load_ring(settings)))
        except ConfigError:
            return None
    return await ensure_active_key(db.pool, company_id, now=now)

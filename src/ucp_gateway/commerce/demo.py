"""Demo seeding for UCP shopping: conformance mode only.

The official UCP conformance suite sends unsigned requests (a dummy ``request-signature`` header).
With ``conformance_mode`` (development only, refused in production) the demo company's signature
policy is set to ``off`` so the suite can run; nothing changes otherwise, and defaults stay strict.
"""

from __future__ import annotations

from ..config import Settings
from ..db import Database, tenant_tx
from ..tenancy import Company

__all__ = ["commerce_demo_seeder"]


async def commerce_demo_seeder(db: Database, company: Company, settings: Settings) -> None:
    """``DEMO_SEEDERS`` entry (idempotent)."""
    if not settings.conformance_mode or not settings.dev_mode:
        return
    async with tenant_tx(db.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'off' WHERE id = $1", company.id)

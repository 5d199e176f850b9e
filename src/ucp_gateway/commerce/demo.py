"""Demo seeding for UCP shopping: conformance mode only.

The official UCP conformance suite sends unsigned requests (a dummy ``request-signature`` header).
With ``conformance_mode`` (development only, refused in production) the demo company's signature
policy is set to ``off`` so the suite can run; nothing changes otherwise, and defaults stay strict.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ..config import Settings
from ..db import Database, tenant_tx
from ..tenancy import Company

__all__ = ["commerce_demo_seeder"]


async def commerce_demo_seeder(db: Database, company: Company, settings: Settings) -> None:
    """``DEMO_SEEDERS`` entry (idempotent): the demo shop gets its first signing key (complete
    responses and order webhooks are signed, and signing fails closed without one); in conformance
    mode its signature policy becomes ``off``."""
    from ..keys import bootstrap_company_key

    await bootstrap_company_key(db, settings, company.id, now=datetime.now(UTC))
    if not settings.conformance_mode or not settings.dev_mode:
        return
    async with tenant_tx(db.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'off' WHERE id = $1", company.id)

"""Demo seeding for UCP shopping: the shop's first signing key, its policy pages' text, and
conformance mode.

The official UCP conformance suite sends unsigned requests (a dummy ``request-signature`` header).
With ``conformance_mode`` (development only, refused in production) the demo company's signature
policy is set to ``off`` so the suite can run; nothing changes otherwise, and defaults stay strict.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ..config import Settings
from ..db import Database, tenant_tx
from ..tenancy import Company

__all__ = ["DEMO_PAGES", "commerce_demo_seeder"]

# settings.commerce.pages of the demo shop: the text of /terms and /privacy (commerce/pages.py)
DEMO_PAGES = {
    "terms": "This is a demonstration shop run by ucp-gateway. Nothing is sold, shipped or charged: "
    "payments go to a mock payment handler and every order is test data.",
    "privacy": "This demo keeps what a buyer agent sends (items, destinations, the buyer's email and consent "
    "choices) in the gateway's own database on this machine. Order updates go only to the webhook of the "
    "platform that placed the order.",
}


async def commerce_demo_seeder(db: Database, company: Company, settings: Settings) -> None:
    """``DEMO_SEEDERS`` entry (idempotent): the demo shop gets its first signing key (complete
    responses and order webhooks are signed, and signing fails closed without one) and the text of
    its /terms and /privacy pages (unless it has its own); in conformance mode its signature policy
    becomes ``off``."""
    from ..keys import bootstrap_company_key

    await bootstrap_company_key(db, settings, company.id, now=datetime.now(UTC))
    async with tenant_tx(db.pool, company.id) as conn:
        # only when the shop has no pages of its own (a re-seed keeps edits), and only into a commerce
        # section that is an object or absent: jsonb || merged into a string or array makes an array
        # of it, so a malformed section is left as the operator wrote it (its readers report it)
        await conn.execute(
            "UPDATE companies SET settings = settings || jsonb_build_object('commerce',"
            " CASE jsonb_typeof(settings->'commerce') WHEN 'object' THEN settings->'commerce' ELSE '{}' END"
            " || jsonb_build_object('pages', $2::jsonb))"
            " WHERE id = $1 AND coalesce(jsonb_typeof(settings->'commerce'), 'null') IN ('object', 'null')"
            " AND coalesce(jsonb_typeof(settings->'commerce'->'pages'), 'null') = 'null'",
            company.id,
            DEMO_PAGES,
        )
        if settings.conformance_mode and settings.dev_mode:
            await conn.execute("UPDATE companies SET signature_policy = 'off' WHERE id = $1", company.id)

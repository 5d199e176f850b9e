"""PostgreSQL access: the embedded server, the migration runner, pools and the tenant context.

Public surface::

    async with open_database(settings) as db:      # embedded or DATABASE_URL; migrated; app-role pool
        async with tenant_tx(db.pool, company_id) as conn:   # transaction + SET LOCAL app.company_id
            ...
"""

from .database import Database, open_database
from .tenant import COMMIT_PROBE, CommitProbe, platform_scan_tx, platform_tx, tenant_tx

__all__ = [
    "COMMIT_PROBE",
    "CommitProbe",
    "Database",
    "open_database",
    "platform_scan_tx",
    "platform_tx",
    "tenant_tx",
]

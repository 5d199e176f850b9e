"""The company's active signing key for response signatures, confirmed in the request's own COMMIT.

:func:`ucp_gateway.keys.active_signing_key` (the reference path) reads which key is active with one
statement per call, so a key moved to ``retired``/``compromised`` (API, CLI or another replica)
never signs again. A signed response (complete_checkout) paid that statement as a round trip of its
own after the handler's COMMIT. :class:`SigningKeys` keeps, per company, the key the reference path
last returned, and uses it only when the database confirms, AFTER the request's last tenant
transaction committed, that exactly this ``kid`` is still the company's active key: the confirming
read rides in the COMMIT's round trip (:class:`ucp_gateway.db.CommitProbe`). Anything else (no
cached key, no confirming commit, another answer, a fault) takes the reference path, which also
refreshes the entry. So the cached key signs only where the reference path, run at that moment,
would return the same key: the read checks the company, the ``active`` state, the kid and the
SHA-256 of the stored encrypted record the cached key was decrypted from (a rewrapped or replaced
record is re-read and decrypted as the reference path would), and at most one key per company is
active (unique index, migration 0010).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from uuid import UUID

import asyncpg

from ..db import CommitProbe

__all__ = ["SigningKeys", "probe_sql"]

_KID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # base64url thumbprints; anything else is never inlined
# One row iff kid is the company's active key (migration 0056: a function, so its query is planned once
# per connection rather than with every signed response). It sets its own tenant context (the
# transaction's is gone after COMMIT) and checks the company explicitly besides RLS.
_PROBE = "SELECT 1 WHERE signing_key_confirmed('{cid}', '{kid}', decode('{digest}', 'hex'))"
_CONFIRMED = "SELECT 1"


def probe_sql(company_id: UUID, kid: str, record: str) -> str | None:
    """The confirming read for ``kid`` of ``company_id`` stored as ``record`` (text safe to send: a
    canonical UUID, a base64url kid, a hex digest), or None for a kid of any other shape (never confirmed)."""
    if not _KID.fullmatch(kid):
        return None
    digest = hashlib.sha256(record.encode()).hexdigest()
    return _PROBE.format(cid=str(UUID(str(company_id))), kid=kid, digest=digest)


class SigningKeys:
    """Per app: company id -> (the key the reference path last returned, its confirming read).
    ``hits``: how many signatures used a confirmed cached key (the rest took the reference path)."""

    def __init__(self, capacity: int = 1024):
        self.capacity = capacity
        self.hits = 0
        self._entries: dict[UUID, tuple[object, str]] = {}

    def probe(self, company_id: UUID) -> CommitProbe | None:
        """A probe (not armed) that confirms the cached key of ``company_id``; None when none is cached."""
        hit = self._entries.get(company_id)
        return None if hit is None else CommitProbe(hit[1])

    async def key(
        self, pool: asyncpg.Pool, company_id: UUID, probe: CommitProbe | None, *, now: dt.datetime
    ):  # -> keys.SigningKey
        """The company's active key: the cached one when ``probe`` (from :meth:`probe`) confirmed it
        at the request's last COMMIT, else :func:`~ucp_gateway.keys.active_signing_key`'s (which
        then becomes the cached one). Raises what that raises (NoActiveKey 409, KeyDecryptError 500)."""
        from ..keys.active import active_signing_key_record

        hit = self._entries.get(company_id)
        if hit is not None and probe is not None and probe.status == _CONFIRMED and probe.sql == hit[1]:
            self.hits += 1
            return hit[0]
        self._entries.pop(company_id, None)  # not confirmed: never used again unless re-read below
        key, record = await active_signing_key_record(pool, company_id, now=now)
        sql = probe_sql(company_id, key.kid, record)
        if sql is not None:
            if len(self._entries) >= self.capacity:  # bounded: one entry per signing company
                self._entries.clear()
            self._entries[company_id] = (key, sql)
        return key

"""Migrations 0033/0051: verb_audit_append takes the lane head and writes it once; concurrent first
appends to a lane (its head row does not exist yet) still chain without gaps."""

from __future__ import annotations

import asyncio

from ucp_gateway.db import tenant_tx
from ucp_gateway.tenancy import create_company
from ucp_gateway.verbs import audit


def _entry(company_id, subject: str) -> dict:
    """An allowed staff audit entry; the subject picks the lane."""
    return {
        "v": 1,
        "company_id": str(company_id),
        "at": "2026-04-08T12:00:00Z",
        "verb": "x.n",
        "decision": "allowed",
        "status": "completed",
        "principal": {"kind": "staff", "subject": subject, "role": "owner"},
    }


async def test_concurrent_first_appends_chain_without_gaps(database):
    company = await create_company(database.pool, slug="fresh", display_name="Fresh", hostnames=["fresh.example"])

    async def one(i: int) -> tuple[int, int]:
        entry = _entry(company.id, "one-subject")  # one subject: one lane
        async with tenant_tx(database.pool, company.id) as conn:
            return await audit.append(conn, company.id, entry)

    got = await asyncio.gather(*[one(i) for i in range(20)])
    assert sorted(seq for _, seq in got) == list(range(1, 21))
    async with tenant_tx(database.pool, company.id) as conn:
        report = await audit.verify_chain(conn, company.id)
        head = await conn.fetchval("SELECT seq FROM verb_audit_heads")  # the one lane's head
    assert report.ok and report.rows == 20 and head == 20


async def test_head_keeps_the_hash_it_replaced(database):
    """Migration 0051: one UPDATE takes and advances the head; ``prev_hash`` keeps the hash it
    replaced, which is the new row's prev_hash, and the head's hash is the new row's hash."""
    company = await create_company(database.pool, slug="heads", display_name="Heads", hostnames=["heads.example"])
    entry = _entry(company.id, "head-subject")
    async with tenant_tx(database.pool, company.id) as conn:
        first, _ = await audit.append(conn, company.id, entry)
        second, seq = await audit.append(conn, company.id, entry)
        rows = {
            r["audit_id"]: r
            for r in await conn.fetch("SELECT audit_id, seq, prev_hash, row_hash, lane FROM verb_audit_log")
        }
        head = await conn.fetchrow(
            "SELECT seq, head_hash, prev_hash FROM verb_audit_heads WHERE lane = $1", rows[second]["lane"]
        )
        report = await audit.verify_chain(conn, company.id)
    assert seq == 2 and head["seq"] == 2 and report.ok and report.rows == 2
    assert bytes(rows[first]["prev_hash"]) == audit.GENESIS
    assert bytes(rows[second]["prev_hash"]) == bytes(rows[first]["row_hash"]) == bytes(head["prev_hash"])
    assert bytes(head["head_hash"]) == bytes(rows[second]["row_hash"])

"""The demo payment handler (flower-shop ``payment_instruments``): the token decides the answer.

The credential token is compared against the company's demo instruments and then forgotten: only the
handler's reference (``demo:<instrument id>``) is stored. Never logged, never echoed.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

import asyncpg

__all__ = ["DEMO_HANDLER_ID", "ChargeResult", "demo_charge"]

DEMO_HANDLER_ID = "mock_payment_handler"
_APPROVING = frozenset({"success_token"})


@dataclass(frozen=True)
class ChargeResult:
    approved: bool
    token_ref: str  # handler reference, safe to store
    reason: str = ""


async def demo_charge(
    conn: asyncpg.Connection,
    *,
    handler_id: str,
    token: str | None,
    amount: int,
    instruments: list[dict[str, Any]] | None = None,
) -> ChargeResult:
    """Authorise ``amount`` (minor units) against a demo instrument token.

    A token matching a demo instrument of ``handler_id`` whose token is ``success_token`` is approved;
    ``fail_token`` or any unknown token is declined. Constant-time comparison of tokens.
    ``instruments``: the company's instruments (``{id, token, handler_id}``, by id) when the caller
    read them already in its transaction; None reads them here.
    """
    if not token:
        return ChargeResult(False, "demo:none", "no credential token")
    if instruments is None:
        rows = await conn.fetch(
            "SELECT id, token FROM payment_instruments WHERE handler_id = $1 ORDER BY id", handler_id
        )
    else:
        rows = [r for r in instruments if r["handler_id"] == handler_id]
    match = None
    for r in rows:
        if hmac.compare_digest(r["token"].encode(), token.encode()) and match is None:
            match = r
    if match is None:
        return ChargeResult(False, "demo:unknown", "unknown payment token")
    approved = any(hmac.compare_digest(match["token"].encode(), t.encode()) for t in _APPROVING)
    return ChargeResult(approved, f"demo:{match['id']}", "" if approved else "card declined")

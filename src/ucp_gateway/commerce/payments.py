"""The demo payment handler (flower-shop ``payment_instruments``): the token decides the answer.

The credential token is compared against the company's demo instruments and then forgotten: only the
handler's reference (``demo:<instrument id>``) is stored. Never logged, never echoed.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

import asyncpg

__all__ = ["DEMO_HANDLER_ID", "ChargeResult", "PageCard", "demo_charge", "demo_tokenize"]

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


@dataclass(frozen=True)
class PageCard:
    """A card the buyer typed on the checkout page, as the demo handler tokenised it: the
    instrument it stands for and its token (the number itself is dropped at once)."""

    instrument_id: str
    token: str
    brand: str
    last_digits: str


_BRANDS = {"4": "visa", "5": "mastercard"}


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


async def demo_tokenize(conn: asyncpg.Connection, number: str) -> PageCard | None:
    """The demo handler's tokenisation of a card number typed on the checkout page: a Luhn-valid
    13-19 digit number (spaces and dashes ignored) of a brand the handler takes (4 Visa, 5
    Mastercard) is the company's demo instrument of that brand and last four digits, else None.
    The number is neither stored nor logged; only the instrument's reference goes on."""
    digits = "".join(ch for ch in number if ch not in " -")
    if not (13 <= len(digits) <= 19 and digits.isascii() and digits.isdigit() and _luhn(digits)):
        return None
    brand = _BRANDS.get(digits[0])
    if brand is None:
        return None
    row = await conn.fetchrow(
        "SELECT id, token, brand, last_digits FROM payment_instruments WHERE handler_id = $1 AND lower(brand) = $2"
        " AND last_digits = $3 ORDER BY id LIMIT 1",
        DEMO_HANDLER_ID, brand, digits[-4:],
    )  # fmt: skip
    return PageCard(row["id"], row["token"], row["brand"], row["last_digits"]) if row else None

"""The buyer pays on the checkout's ``continue_url`` page when the agent may not place the order
(``buyer_handoff_required``: its access level, an anonymous agent by default).

The page shows a payment form for the company's payment handler (the demo's ``mock_payment_handler``
here) next to the confirmation form: card number and expiry, typed by the buyer, tokenised by the
handler (:func:`.payments.demo_tokenize`) and dropped: only the instrument's reference is kept,
and the page shows at most the brand and the last four digits. ``POST /checkout-sessions/{id}/pay``
spends a confirmation token of its own (single use, bound to the checkout's digest and the CSRF
token, as the confirmation form's), then completes the checkout through the same verb as the
agent's ``complete_checkout`` (``checkout.complete``: audited, idempotent under a key derived from
the token, one order however often the form is sent), for the checkout's own caller, so the agent
sees ``completed`` and its order on its next call. The buyer is no agent: neither the access
level nor the agent's amount limit applies to them. Fulfillment is what the agent chose, shown on
the page; a checkout that still misses something other than the buyer gets no payment form.

| answer | when |
|---|---|
| 403 | another site; CSRF field missing or not the cookie's |
| 400 | the agreement box not ticked; a card number the handler does not take; an expiry not MM/YY or past |
| 409 | the token spent, expired or foreign; the checkout closed, changed, or not waiting for the buyer |
| 402 | the payment was declined (the checkout stays open: the buyer may try another card) |
| 303 to the page (``?paid=1``) | completed: the page shows the order |
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from aiohttp import web

from ..appkeys import CLOCK, DATABASE
from ..db import tenant_tx
from ..htmlpage import PAGE_HEADERS
from ..jsonbody import dumps_compact
from ..levels import OPEN_LEVELS
from ..tenancy import Company
from . import confirm, repo, service
from .checkout import rfc3339
from .context import build_context
from .payments import DEMO_HANDLER_ID, demo_tokenize
from .service import HANDOFF_CODE
from .status import TERMINAL
from .verbs import run_verb, verb_dispatcher

__all__ = ["pay_form", "pay_ready", "pay_refusal"]

_SPENT = {
    "invalid": "This payment form is not valid for this checkout.",
    "used": "This payment form was already sent.",
    "expired": "This payment form expired.",
}
_EXPIRY = re.compile(r"^(0[1-9]|1[0-2])/([0-9]{2})$")


def pay_ready(body: Mapping[str, Any]) -> bool:
    """Whether the page may take the buyer's payment: the checkout waits for the buyer
    (``buyer_handoff_required``) and nothing but page-resolvable escalations is in the way."""
    errors = [m for m in body.get("messages") or [] if m.get("type") == "error"]
    codes = {m.get("code") for m in errors}
    return HANDOFF_CODE in codes and codes <= set(confirm.PAGE_RESOLVES)


async def pay_form(
    conn: asyncpg.Connection, company_id, cid: str, digest: str, csrf: str, total: int, *, now: datetime, ttl: int
) -> dict[str, Any]:
    """The template context of the payment form (a fresh token of its own)."""
    token = await confirm.issue_page_token(conn, company_id, cid, digest, csrf, now=now, ttl=ttl)
    return {"action": f"/checkout-sessions/{cid}/pay", "token": token, "csrf": csrf, "total": total,
            "handler": "Card (demo payment handler: nothing is charged)",
            "expires_at": rfc3339(now + timedelta(seconds=ttl))}  # fmt: skip


def _expiry_ok(value: str, now: datetime) -> bool:
    m = _EXPIRY.match(value.strip())
    return m is not None and (2000 + int(m.group(2)), int(m.group(1))) >= (now.year, now.month)


def pay_refusal(form: Mapping[str, Any], now: datetime) -> str | None:
    """Why the form's fields are refused before anything is spent (400), or None."""
    if form.get("agree") != "yes":
        return "Tick the box to agree, then pay."
    if not _expiry_ok(str(form.get("card_expiry") or ""), now):
        return "Enter the card's expiry as MM/YY (a month not yet past)."
    return None


async def pay(request: web.Request, company: Company, cid: str, token: str, csrf: str, form) -> tuple[int, str]:
    """Run the payment of a checked form. Returns ``(status, why)``: ``(303, "")`` once completed,
    else the page's status and the reason shown to the buyer."""
    now = request.app[CLOCK].now()
    pool = request.app[DATABASE].pool
    async with tenant_tx(pool, company.id) as conn:
        card = await demo_tokenize(conn, str(form.get("card_number") or "")[:40])
    if card is None:
        return 400, "This card number is not accepted: check it and try again."
    async with tenant_tx(pool, company.id) as conn:
        digest, why = await confirm.spend_page_token(conn, cid, token, csrf, now=now)
        if digest is None:
            return 409, _SPENT[why]
        row = await repo.get_checkout(conn, cid)
    if row is None or row["status"] in TERMINAL or row["expires_at"] <= now:
        return 409, "This checkout is no longer open."
    if confirm.body_digest(row["body"]) != digest:
        return 409, "The checkout changed since you opened it: review it again."
    if not pay_ready(row["body"]):
        return 409, "This checkout does not wait for your payment now."
    data = {"payment": {"instruments": [{"id": card.instrument_id, "handler_id": DEMO_HANDLER_ID, "type": "card",
                                         "credential": {"type": "token", "token": card.token}}]}}  # fmt: skip
    body = await _complete(request, company, row["caller"], cid, data, key=hashlib.sha256(token.encode()).hexdigest())
    if body.get("status") == "completed":
        return 303, ""
    if any(m.get("code") == "payment_failed" for m in body.get("messages") or []):
        return 402, "The payment was declined: try another card."
    return 409, "The checkout could not be completed: " + "; ".join(
        str(m.get("content")) for m in body.get("messages") or [] if m.get("type") == "error"
    )


async def _complete(request: web.Request, company: Company, caller: str, cid: str, data: dict, *, key: str) -> dict:
    """``checkout.complete`` for the checkout's caller, as the buyer (no access level, no agent limit)."""
    ctx = build_context(request, company, caller, None)
    ctx = dataclasses.replace(ctx, access_table=OPEN_LEVELS, max_order_amount=None)
    dispatcher = verb_dispatcher(request.app)
    if dispatcher is None:  # commerce_via_verbs=false (development only): the operation itself
        async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
            return (await service.complete(conn, ctx, cid, data)).body
    text = dumps_compact(data).decode()
    args = {"method": "PAGE", "path": f"/checkout-sessions/{cid}/pay", "body_text": text,
            "raw_sha256": hashlib.sha256(text.encode()).hexdigest(), "id": cid}  # fmt: skip
    status, raw, _ = await run_verb(dispatcher, company, caller, ctx, "checkout.complete", args, "page-" + key[:40])
    out = json.loads(raw)
    return out if status < 400 else {"messages": [{"type": "error", "content": out.get("content", "refused")}]}


def see_page(cid: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(f"/checkout-sessions/{cid}?paid=1", headers=dict(PAGE_HEADERS))

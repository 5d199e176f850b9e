"""Shopping operations (imperative shell): one call = one transaction on a tenant connection.

Each operation returns an :class:`Outcome` (HTTP status + JSON body): business outcomes are bodies
(201/200 resources, 200 error envelopes); protocol errors are raised as GatewayError subclasses
(``InvalidTransition`` -> 409, ``InvalidRequest`` -> 400). Prices come from the catalogue only.
Contract: an operation raises a 4xx GatewayError only before its first write, so a refused call
leaves nothing behind without a savepoint (the verb handler commits the refusal's audit row and
idempotency record). Database errors abort the whole transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from ..levels import DEFAULT_LEVELS, AccessLevel, permits
from ..versions import from_wire, to_wire
from . import repo
from .catalog import PickupLocation
from .checkout import ShopInfo, price_checkout, render_checkout
from .confirm import checkout_digest, has_confirmation
from .messages import error, error_envelope
from .orders import order_snapshot, render_order
from .payments import demo_charge
from .status import TERMINAL, InvalidTransition, status_for_messages, transition
from .validation import InvalidRequest, parse_complete, parse_state

__all__ = [
    "HANDOFF_CODE",
    "UCP_VERSION",
    "CommerceContext",
    "Outcome",
    "cancel",
    "complete",
    "create",
    "get",
    "not_found",
    "price_state",
    "update",
    "wire",
]

UCP_VERSION = "2026-04-08"  # the neutral shape's version: what a request without negotiation is answered in


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict[str, Any]


@dataclass(frozen=True)
class CommerceContext:
    """Everything an operation needs besides the connection.

    ``caller`` is the verified platform profile URL (the buyer agent); ``max_order_amount`` is the
    per-buyer-agent amount limit in minor units (None = unlimited). ``access_level`` is the caller's
    (:mod:`ucp_gateway.levels`) and ``access_table`` the company's: :meth:`permits` reads them.
    """

    company_id: uuid.UUID
    caller: str
    now: datetime
    shop: ShopInfo
    order_ucp: dict[str, Any]
    handler_ids: frozenset[str]
    currency: str = "USD"
    ttl: timedelta = timedelta(hours=6)
    max_order_amount: int | None = None
    pickup_locations: tuple[PickupLocation, ...] = field(default=())
    webhook_url: str | None = None  # the platform's order webhook_url, from negotiation
    version: str = UCP_VERSION  # the protocol version negotiated for this request (ucp_gateway.versions)
    # runs an operation's last write (verb runtime: with the audit row, one round trip); None = at once
    last_write: repo.LastWrite | None = None
    access_level: str = AccessLevel.IDENTIFIED
    access_table: Any = field(default_factory=lambda: DEFAULT_LEVELS)

    def permits(self, operation: str) -> bool:
        """Whether this caller's access level may run ``operation`` (``levels.OPERATIONS``)."""
        return permits(self.access_table, self.access_level, operation)

    def with_last_write(self, last_write: repo.LastWrite | None) -> CommerceContext:
        """A copy with ``last_write`` set (what ``dataclasses.replace`` gives, without its per-call
        field walk: the verb handler makes one per write request)."""
        new = object.__new__(CommerceContext)
        new.__dict__.update(self.__dict__)
        new.__dict__["last_write"] = last_write
        return new


def wire(out: Outcome, ctx: CommerceContext, kind: str) -> Outcome:
    """An operation's Outcome in the caller's protocol version (``ctx.version``): the one place a
    response body leaves the domain's neutral shape (``versions.to_wire``).

    A stored resource answers with this request's ``ucp`` envelope (a checkout created under one
    version is read and completed under another: the state is one, each answer in the caller's
    version); an error envelope gets this request's version; a protocol error (``{"code",
    "content"}``) has no envelope and passes as it is. ``kind``: ``checkout``, ``order``, ``cart``,
    ``catalog`` (whose bodies are rendered per request with the request's envelope already).
    """
    body = out.body
    ucp = body.get("ucp") if isinstance(body, dict) else None
    if not isinstance(ucp, dict):
        return out
    if "id" not in body or ucp.get("status") == "error":
        if ucp.get("version") != ctx.version:
            body = {**body, "ucp": {**ucp, "version": ctx.version}}
    elif kind in ("checkout", "order"):  # stored resources: this request's envelope
        envelope = ctx.shop.ucp if kind == "checkout" else ctx.order_ucp
        if ucp is not envelope:
            body = {**body, "ucp": envelope}
    body = to_wire(kind, body, ctx.version)
    return out if body is out.body else Outcome(out.status, body)


def not_found(ctx: CommerceContext, what: str) -> Outcome:
    """The 200 ``not_found`` error envelope of an unknown (or foreign) resource ``what``."""
    return Outcome(
        200,
        error_envelope(ctx.version, "not_found", f"{what} not found", continue_url=ctx.shop.base_url + "/"),
    )


async def price_state(conn: asyncpg.Connection, ctx: CommerceContext, state: dict[str, Any]):
    """The checkout pricing of a writable state (line items, buyer, codes) against the catalogue:
    one pricing code for checkouts and carts (:func:`.checkout.price_checkout`)."""
    catalog = await repo.load_catalog(
        conn,
        [li["item"]["id"] for li in state["line_items"]],
        currency=ctx.currency,
        buyer_email=(state.get("buyer") or {}).get("email"),
        pickup_locations=ctx.pickup_locations,
    )
    return price_checkout(state, catalog, ctx.shop)


def _render(ctx: CommerceContext, cid: str, state, priced, status, expires_at, **kw) -> dict[str, Any]:
    return render_checkout(
        checkout_id=cid,
        state=state,
        priced=priced,
        status=status,
        currency=ctx.currency,
        shop=ctx.shop,
        expires_at=expires_at,
        **kw,
    )


async def create(
    conn: asyncpg.Connection,
    ctx: CommerceContext,
    data: dict[str, Any],
    *,
    neutral: bool = False,
    before_write: Callable[[str], Awaitable[None]] | None = None,
) -> Outcome:
    """``POST /checkout-sessions`` (UCP checkout.md "Create"): 201 with the checkout, or HTTP 200
    with an error envelope when no requested item can be sold. ``data`` is in the caller's version
    unless ``neutral`` (a cart's contents, :func:`.carts.create_checkout`); ``before_write(id)``
    runs in the transaction once the checkout will be created, before it is written (the
    checkout's insert is the operation's last write)."""
    if not neutral:
        data = from_wire("checkout.request", data, ctx.version)
    state = parse_state(data, update=False)
    priced = await price_state(conn, ctx, state)
    if priced.nothing_purchasable:
        msgs = [dict(m, severity="unrecoverable") for m in priced.messages if m["type"] == "error"]
        msgs = [m for m in msgs if m["code"] != "missing"] or msgs
        body = {"ucp": {"version": ctx.version, "status": "error"}, "messages": msgs}
        return Outcome(200, body)
    cid = f"chk_{uuid.uuid4().hex}"
    expires_at = ctx.now + ctx.ttl
    body = _render(ctx, cid, state, priced, priced.status, expires_at)
    if before_write is not None:
        await before_write(cid)
    await repo.insert_checkout(
        conn,
        ctx.company_id,
        {
            "id": cid,
            "status": priced.status,
            "currency": ctx.currency,
            "state": state,
            "body": body,
            "caller": ctx.caller,
            "created_at": ctx.now,
            "expires_at": expires_at,
        },
        last_write=ctx.last_write,
    )
    return Outcome(201, body)


async def _load(conn: asyncpg.Connection, ctx: CommerceContext, cid: str, *, lock: bool):
    """The row (expired non-terminal sessions are canceled first) or None.

    ``lock`` (the writers: update, complete, cancel) returns an expired session as canceled without
    writing: every writer then refuses it (409) and a refusal leaves nothing behind; a read persists it.
    """
    row = await repo.get_checkout(conn, cid, for_update=lock)
    if row is None or row["caller"] != ctx.caller:  # a session belongs to the platform that opened it
        return None
    if row["status"] not in TERMINAL and row["expires_at"] <= ctx.now:
        if lock:
            return {**dict(row), "status": transition(row["status"], "expire")}
        row = await repo.get_checkout(conn, cid, for_update=True)
        if row["status"] in TERMINAL:
            return row
        body = dict(row["body"], status=transition(row["status"], "expire"))
        body.pop("continue_url", None)
        await repo.update_checkout(conn, cid, status=body["status"], state=row["state"], body=body, now=ctx.now)
        row = await repo.get_checkout(conn, cid)
    return row


async def _lock_priced(conn: asyncpg.Connection, ctx: CommerceContext, cid: str, state: dict[str, Any] | None):
    """``(row, catalogue)`` for a writer in one round trip (:func:`repo.lock_checkout_priced`), with
    :func:`_load`'s rules for the locked case: a foreign caller's session is None, an expired
    one comes back as canceled without a write. ``state`` None prices the stored state."""
    row, catalog = await repo.lock_checkout_priced(
        conn, cid, state=state, currency=ctx.currency, pickup_locations=ctx.pickup_locations
    )
    if row is None or row["caller"] != ctx.caller:
        return None, None
    if row["status"] not in TERMINAL and row["expires_at"] <= ctx.now:
        return {**dict(row), "status": transition(row["status"], "expire")}, catalog
    return row, catalog


def _modifiable(row, op: str) -> None:
    if row["status"] in TERMINAL or row["status"] == "complete_in_progress":
        raise InvalidTransition(f"checkout {row['id']} is {row['status']}; {op} is not allowed")


async def get(conn: asyncpg.Connection, ctx: CommerceContext, cid: str) -> Outcome:
    """``GET /checkout-sessions/{id}``: the latest state; 200 ``not_found`` envelope when unknown."""
    row = await _load(conn, ctx, cid, lock=False)
    return not_found(ctx, "Checkout") if row is None else Outcome(200, row["body"])


async def update(conn: asyncpg.Connection, ctx: CommerceContext, cid: str, data: dict[str, Any]) -> Outcome:
    """``PUT /checkout-sessions/{id}``: full replacement of the writable state; everything recomputed.

    Raises: InvalidTransition (409) for completed/canceled sessions; InvalidRequest (400), also for
    a body ``id`` (platforms often send the whole checkout back) that is not the URL's ``cid``.
    """
    try:  # parsed first so the row lock and the catalogue are one round trip; refused in the same order
        if "id" in data and data["id"] != cid:
            raise InvalidRequest("$.id: the body's id differs from the checkout id in the URL")
        state, bad = parse_state(from_wire("checkout.request", data, ctx.version), update=True), None
    except Exception as exc:
        state, bad = None, exc
    if state is None:
        row, catalog = await _load(conn, ctx, cid, lock=True), None
    else:
        row, catalog = await _lock_priced(conn, ctx, cid, state)
    if row is None:
        return not_found(ctx, "Checkout")
    _modifiable(row, "update")
    if bad is not None:
        raise bad
    assert state is not None and catalog is not None
    priced = price_checkout(state, catalog, ctx.shop)
    status = transition(row["status"], f"recompute:{priced.status}")
    body = _render(ctx, cid, state, priced, status, row["expires_at"])
    await repo.update_checkout(conn, cid, status=status, state=state, body=body, now=ctx.now, last_write=ctx.last_write)
    return Outcome(200, body)


async def cancel(conn: asyncpg.Connection, ctx: CommerceContext, cid: str) -> Outcome:
    """``POST /checkout-sessions/{id}/cancel``: 200 with ``status: canceled``; 409 if terminal."""
    row = await _load(conn, ctx, cid, lock=True)
    if row is None:
        return not_found(ctx, "Checkout")
    _modifiable(row, "cancel")
    body = dict(row["body"], status=transition(row["status"], "cancel"))
    body.pop("continue_url", None)
    await repo.update_checkout(
        conn, cid, status=body["status"], state=row["state"], body=body, now=ctx.now, last_write=ctx.last_write
    )
    return Outcome(200, body)


#: The escalation of a complete the caller's access level may not run (UCP checkout.md "requires_escalation":
#: the buyer finishes at continue_url); the confirmation page resolves it (confirm.PAGE_RESOLVES).
HANDOFF_CODE = "buyer_handoff_required"


class _Abort(Exception):
    def __init__(self, messages: list[dict[str, Any]]):
        self.messages = messages


async def complete(conn: asyncpg.Connection, ctx: CommerceContext, cid: str, data: dict[str, Any]) -> Outcome:
    """``POST /checkout-sessions/{id}/complete`` in this one transaction (UCP checkout.md "Complete").

    Checks the instrument's handler against the advertised ones, reserves stock (never below zero),
    charges through the demo handler, creates the order and queues the ``order created`` webhook.
    A decline or missing stock is a recoverable message on a 200 checkout, never a 500. The row lock
    makes concurrent completes of one checkout produce exactly one order (the loser gets 409).
    """
    row, catalog = await _lock_priced(conn, ctx, cid, None)
    if row is None:
        return not_found(ctx, "Checkout")
    _modifiable(row, "complete")
    instrument, token = parse_complete(data)
    state = dict(row["state"], payment={"instruments": [instrument]})
    assert catalog is not None
    priced = price_checkout(state, catalog, ctx.shop)  # the stored state's items and buyer
    extra: list[dict[str, Any]] = []
    if instrument["handler_id"] not in ctx.handler_ids:
        extra.append(
            error(
                "payment_handler_unsupported",
                f"Payment handler '{instrument['handler_id']}' is not offered.",
                path="$.payment.instruments[0].handler_id",
            )
        )
    if not ctx.permits("checkout.complete") and not await has_confirmation(
        conn, cid, checkout_digest(priced.line_items, priced.totals, ctx.currency)
    ):  # an agent whose level may not place orders hands the buyer over to the continue_url page
        extra.append(
            error(
                HANDOFF_CODE,
                "This agent is not identified to the shop: the buyer completes the purchase on the shop's page.",
                severity="requires_buyer_input",
            )
        )
    elif (
        ctx.max_order_amount is not None
        and priced.total > ctx.max_order_amount
        and not await has_confirmation(conn, cid, checkout_digest(priced.line_items, priced.totals, ctx.currency))
    ):  # the buyer confirms an amount above the agent's limit on the continue_url page
        extra.append(
            error(
                "amount_limit_exceeded",
                "The order total is above this agent's limit; the buyer must confirm on the shop's page.",
                severity="requires_buyer_review",
                path="$.totals",
            )
        )
    if priced.status != "ready_for_complete" or extra:
        status = transition(row["status"], f"recompute:{status_for_messages(priced.messages + extra)}")
        body = _render(ctx, cid, state, priced, status, row["expires_at"], extra_messages=extra)
        await repo.update_checkout(conn, cid, status=status, state=state, body=body, now=ctx.now)
        return Outcome(200, body)
    status = transition(transition(row["status"], "recompute:ready_for_complete"), "complete_started")
    order_id = f"ord_{uuid.uuid4().hex}"
    pay_id = f"pay_{uuid.uuid4().hex}"
    # The demo charge only checks the token (no side effect), so it runs before anything is written;
    # the stock is taken last, by the statement right before the verb's commit, so the product's
    # inventory row is locked as briefly as possible (every buyer of the product waits on it).
    charge = await demo_charge(
        conn, handler_id=instrument["handler_id"], token=token, amount=priced.total, instruments=row["instruments"]
    )
    if not charge.approved:
        declined = {
            "id": pay_id,
            "checkout_id": cid,
            "handler_id": instrument["handler_id"],
            "instrument_id": instrument["id"],
            "token_ref": charge.token_ref,
            "amount": priced.total,
            "currency": ctx.currency,
            "status": "declined",
            "created_at": ctx.now,
        }
        msg = error(
            "payment_failed", "The payment was declined; try another payment method.", path="$.payment.instruments[0]"
        )
        return await _complete_failed(conn, ctx, cid, row, state, priced, status, [msg], payment=declined)
    permalink = f"{ctx.shop.base_url}/orders/{order_id}"
    order_ref = {"id": order_id, "label": f"#{order_id[4:12].upper()}", "permalink_url": permalink}
    done = transition(status, "complete_succeeded")
    body = _render(ctx, cid, state, priced, done, row["expires_at"], order=order_ref)
    snapshot = order_snapshot(body, order_id=order_id, label=order_ref["label"], permalink_url=permalink)
    writes = {
        "checkout": {"status": done, "state": state, "body": body, "now": ctx.now},
        "order": {
            "id": order_id,
            "checkout_id": cid,
            "caller": row["caller"],
            "currency": ctx.currency,
            "total": priced.total,
            "snapshot": snapshot,
        },
        "payment": {
            "id": pay_id,
            "handler_id": instrument["handler_id"],
            "instrument_id": instrument["id"],
            "token_ref": charge.token_ref,
            "status": "captured",
        },
        "outbox": {
            "event_type": "order.created",
            "caller": row["caller"],
            # in the completing platform's version: the order webhook goes to that platform
            "payload": to_wire("order", render_order(snapshot, [], [], ctx.order_ucp), ctx.version),
            "target_url": ctx.webhook_url,
            "now": ctx.now,
        },
    }
    items = _merged(priced.reservable)
    if len(items) == 1:  # one product: stock and order in one statement, all or nothing, no savepoint

        def short() -> Awaitable[Outcome]:  # nothing of the order was written: a recoverable message
            return _complete_failed(conn, ctx, cid, row, state, priced, status, _out_of_stock([items[0][0]]))

        # verb runtime: the statement goes out with the audit row and idempotency record (one round
        # trip less, and the inventory row is locked only from there to COMMIT); if the stock is
        # short, that statement writes nothing and the runtime answers short() instead
        written = await repo.complete_order(
            conn, ctx.company_id, **writes, reserve=items[0], last_write=ctx.last_write, otherwise=short
        )
        if written is not False:
            return Outcome(200, body)
        return await short()
    try:
        async with conn.transaction():  # savepoint: the order stands or falls with the stock
            await repo.complete_order(conn, ctx.company_id, **writes)
            short = await repo.reserve_inventory(conn, items)  # rows locked in product order: no deadlock
            if short:
                raise _Abort(_out_of_stock(short))
    except _Abort as abort:
        return await _complete_failed(conn, ctx, cid, row, state, priced, status, abort.messages)
    return Outcome(200, body)


def _merged(items: list[tuple[str, int]]) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for pid, q in items:
        out[pid] = out.get(pid, 0) + q
    return sorted(out.items())


def _out_of_stock(products: list[str]) -> list[dict[str, Any]]:
    return [error("out_of_stock", f"Insufficient stock for '{p}'.", path="$.line_items") for p in products]


async def _complete_failed(
    conn, ctx: CommerceContext, cid: str, row, state, priced, status, messages, payment=None
) -> Outcome:
    status = transition(status, "complete_failed")  # before any write (operations raise before writing)
    body = _render(ctx, cid, state, priced, status, row["expires_at"], extra_messages=messages)
    if payment is not None:
        await repo.insert_payment(conn, ctx.company_id, payment)
    await repo.update_checkout(conn, cid, status=status, state=state, body=body, now=ctx.now)
    return Outcome(200, body)

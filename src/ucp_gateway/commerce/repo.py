"""asyncpg repositories for the shopping tables (migrations 0002, 0040). Thin: no policy here.

Every function takes a connection already inside ``tenant_tx`` (RLS scopes it to one company).
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from .catalog import Address, Catalog, DiscountRule, PickupLocation, Product, Promotion, ShippingRate

__all__ = [
    "complete_order",
    "get_checkout",
    "get_order_rows",
    "insert_checkout",
    "insert_event",
    "insert_outbox",
    "insert_payment",
    "load_catalog",
    "lock_checkout_priced",
    "reserve_inventory",
    "update_checkout",
]


# What pricing reads per request, as one row of json columns: the products {ids} with stock, the
# saved addresses of the buyer {email} when it is a known customer, and the version of the rarely
# changing parts (rates, promotions, codes; migration 0052), which come from _STATIC when cached.
_ADDRESSES = (
    " (SELECT coalesce(json_agg(json_build_object('id', a.id, 'street_address', a.street_address,"
    "   'city', a.city, 'state', a.state, 'postal_code', a.postal_code, 'country', a.country) ORDER BY a.id), '[]')"
    "   FROM addresses a JOIN customers c ON c.company_id = a.company_id AND c.id = a.customer_id"
    "   WHERE {email} IS NOT NULL AND lower(c.email) = lower({email})) AS addresses,"
)
# what _ADDRESSES gives for no email, without the subquery (its plan, locks and RLS quals)
_NO_ADDRESSES = " '[]'::json AS addresses,"
_CATALOG_COLUMNS = (
    " (SELECT coalesce(json_agg(json_build_object('id', p.id, 'title', p.title, 'price', p.price,"
    "   'currency', p.currency, 'image_url', p.image_url, 'stock', coalesce(i.quantity, 0))), '[]')"
    "   FROM products p LEFT JOIN inventory i ON i.company_id = p.company_id AND i.product_id = p.id"
    "   WHERE p.id = ANY({ids})) AS products,"
    "{addresses}"
    " (SELECT version FROM catalog_versions) AS catalog_version"
)
_LOAD_CATALOG = "SELECT" + _CATALOG_COLUMNS.format(ids="$1::text[]", addresses=_ADDRESSES.format(email="$2::text"))
_LOAD_CATALOG_NO_EMAIL = "SELECT" + _CATALOG_COLUMNS.format(ids="$1::text[]", addresses=_NO_ADDRESSES)

# The rarely changing parts with their version, in one snapshot (read when not cached).
_STATIC = (
    "SELECT (SELECT version FROM catalog_versions) AS catalog_version,"
    " (SELECT coalesce(json_agg(json_build_object('id', id, 'country_code', country_code,"
    "   'service_level', service_level, 'price', price, 'title', title, 'currency', currency) ORDER BY id), '[]')"
    "   FROM shipping_rates) AS rates,"
    " (SELECT coalesce(json_agg(json_build_object('id', id, 'type', type, 'min_subtotal', min_subtotal,"
    "   'eligible_item_ids', eligible_item_ids, 'description', description) ORDER BY id), '[]')"
    "   FROM promotions) AS promos,"
    " (SELECT coalesce(json_agg(json_build_object('code', code, 'type', type, 'value', value,"
    "   'description', description, 'currency', currency)), '[]') FROM discounts) AS codes"
)

# The checkout row locked (FOR UPDATE: serialises its writers) and the catalogue for pricing it,
# in one statement. The product ids and buyer email are the request's ($2 true: $3, $4) or those
# of the stored state (complete). The catalogue is read in this statement's snapshot; stock is
# only shown from it (the reservation itself re-checks the locked inventory row).
_LOCK_PRICED = (
    "SELECT c.id, c.status, c.caller, c.expires_at, {state},"
    + _CATALOG_COLUMNS.format(ids="k.ids", addresses="{addresses}")
    + " FROM checkout_sessions c CROSS JOIN LATERAL (SELECT"
    "  CASE WHEN $2 THEN $3::text[] ELSE"
    "   ARRAY(SELECT e->'item'->>'id' FROM jsonb_array_elements(c.state->'line_items') AS e) END AS ids,"
    "  CASE WHEN $2 THEN $4::text ELSE c.state->'buyer'->>'email' END AS email) AS k"
    " WHERE c.id = $1 FOR UPDATE OF c"
)
# complete: also the demo payment instruments (payments.demo_charge), saving it a round trip; the
# stored buyer email is only known in the statement (its addresses subquery skips itself when null)
_LOCK_PRICED_STATE = _LOCK_PRICED.format(
    state="c.state, (SELECT coalesce(json_agg(json_build_object('id', id, 'token', token, 'handler_id', handler_id)"
    " ORDER BY id), '[]') FROM payment_instruments) AS instruments",
    addresses=_ADDRESSES.format(email="k.email"),
)
# update: the new state's email ($4) is known here, and without one the subquery is left out
_LOCK_PRICED_NO_STATE = _LOCK_PRICED.format(state="NULL::jsonb AS state", addresses=_ADDRESSES.format(email="k.email"))
_LOCK_PRICED_NO_STATE_NO_EMAIL = _LOCK_PRICED.format(state="NULL::jsonb AS state", addresses=_NO_ADDRESSES)


@dataclass(frozen=True, slots=True)
class _Static:
    """The rarely changing catalogue parts of one version: rates (all currencies), promotions, codes."""

    rates: tuple[ShippingRate, ...]
    promotions: tuple[Promotion, ...]
    discounts: dict[str, DiscountRule]


# version (a random uuid per state of one company's rates, promotions and codes: migration 0052)
# -> its parsed parts. A version names one company's state, so the cache is shared by tenants
# without mixing them, and by the replicas' own copies without coordination.
_STATIC_CACHE: OrderedDict[uuid.UUID, _Static] = OrderedDict()
_STATIC_CACHE_MAX = 256


def _parse_static(row: asyncpg.Record) -> _Static:
    return _Static(
        rates=tuple(ShippingRate(**r) for r in row["rates"]),
        promotions=tuple(
            Promotion(r["id"], r["type"], r["min_subtotal"], tuple(r["eligible_item_ids"]), r["description"])
            for r in row["promos"]
        ),
        discounts={
            r["code"]: DiscountRule(**{**r, "currency": (r["currency"] or "").strip() or None}) for r in row["codes"]
        },
    )


async def _static(conn: asyncpg.Connection, version: uuid.UUID | None) -> _Static:
    """The static parts of ``version`` (the version the caller's statement saw): cached, or read
    now with the version they belong to (cached under it unless the company has none)."""
    if version is not None:
        got = _STATIC_CACHE.get(version)
        if got is not None:
            return got
    row = await conn.fetchrow(_STATIC)
    got = _parse_static(row)
    if row["catalog_version"] is not None:
        _STATIC_CACHE[row["catalog_version"]] = got
        while len(_STATIC_CACHE) > _STATIC_CACHE_MAX:
            _STATIC_CACHE.popitem(last=False)
    return got


async def _catalog(
    conn: asyncpg.Connection, row: asyncpg.Record, currency: str, pickup_locations: tuple[PickupLocation, ...]
) -> Catalog:
    static = await _static(conn, row["catalog_version"])
    return Catalog(
        currency=currency,
        products={r["id"]: Product(**{**r, "currency": r["currency"].strip()}) for r in row["products"]},
        rates=tuple(r for r in static.rates if r.currency.strip() == currency),
        promotions=static.promotions,
        discounts=dict(static.discounts),
        saved_addresses=tuple(Address(**r) for r in row["addresses"]),
        pickup_locations=pickup_locations,
    )


async def load_catalog(
    conn: asyncpg.Connection,
    product_ids: list[str],
    *,
    currency: str,
    buyer_email: str | None,
    pickup_locations: tuple[PickupLocation, ...] = (),
) -> Catalog:
    """Read what pricing needs (one round trip while the company's rates, promotions and codes are
    cached at their current version; two otherwise): the requested products with stock, rates,
    promotions, codes and the saved addresses of the buyer when ``buyer_email`` belongs to a
    known customer."""
    if buyer_email is None:  # no customer to match: no addresses
        row = await conn.fetchrow(_LOAD_CATALOG_NO_EMAIL, list(set(product_ids)))
    else:
        row = await conn.fetchrow(_LOAD_CATALOG, list(set(product_ids)), buyer_email)
    return await _catalog(conn, row, currency, pickup_locations)


async def lock_checkout_priced(
    conn: asyncpg.Connection,
    checkout_id: str,
    *,
    state: dict[str, Any] | None,
    currency: str,
    pickup_locations: tuple[PickupLocation, ...] = (),
) -> tuple[asyncpg.Record | None, Catalog | None]:
    """The checkout row, locked FOR UPDATE, and the catalogue to price it, in one round trip (two
    when the company's rates, promotions and codes are not cached at their current version).

    ``state``: the new writable state (update): its line items' products and buyer email are
    read; None (complete): those of the stored state, and the row then carries ``state`` and
    ``instruments`` (the company's demo payment instruments: ``[{id, token, handler_id}]`` by id).
    Returns ``(row with id, status, caller, expires_at, state; catalogue)`` or ``(None, None)``.
    """
    if state is None:
        row = await conn.fetchrow(_LOCK_PRICED_STATE, checkout_id, False, None, None)
    else:
        ids = list({li["item"]["id"] for li in state["line_items"]})
        email = (state.get("buyer") or {}).get("email")
        sql = _LOCK_PRICED_NO_STATE if email is not None else _LOCK_PRICED_NO_STATE_NO_EMAIL
        row = await conn.fetchrow(sql, checkout_id, True, ids, email)
    return (None, None) if row is None else (row, await _catalog(conn, row, currency, pickup_locations))


# async (sql, *args, ctes="", otherwise=None) -> bool | None: run a caller's last statement
# (VerbContext.write_last: True/False = run at once, whether it wrote a row; None = deferred)
LastWrite = Callable[..., Awaitable[bool | None]]


async def insert_checkout(
    conn: asyncpg.Connection, company_id: uuid.UUID, row: dict[str, Any], *, last_write: LastWrite | None = None
) -> None:
    """Insert a new checkout row. ``last_write``: the caller sends nothing after this statement
    and lets ``last_write`` run it (possibly later, in the same transaction)."""
    await (last_write or conn.execute)(
        "INSERT INTO checkout_sessions (company_id, id, status, currency, state, body, caller, created_at,"
        " updated_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)",
        company_id,
        row["id"],
        row["status"],
        row["currency"],
        row["state"],
        row["body"],
        row["caller"],
        row["created_at"],
        row["expires_at"],
    )


async def get_checkout(
    conn: asyncpg.Connection, checkout_id: str, *, for_update: bool = False
) -> asyncpg.Record | None:
    """The checkout row or None. ``for_update`` takes the row lock (serialises concurrent writers)."""
    sql = "SELECT * FROM checkout_sessions WHERE id = $1" + (" FOR UPDATE" if for_update else "")
    return await conn.fetchrow(sql, checkout_id)


async def update_checkout(
    conn: asyncpg.Connection,
    checkout_id: str,
    *,
    status: str,
    state: dict,
    body: dict,
    now: datetime,
    order_id: str | None = None,
    last_write: LastWrite | None = None,
) -> None:
    """Rewrite the checkout row. ``last_write`` as for :func:`insert_checkout`."""
    await (last_write or conn.execute)(
        "UPDATE checkout_sessions SET status = $2, state = $3, body = $4, updated_at = $5,"
        " order_id = coalesce($6, order_id) WHERE id = $1",
        checkout_id,
        status,
        state,
        body,
        now,
        order_id,
    )


async def reserve_inventory(conn: asyncpg.Connection, items: list[tuple[str, int]]) -> list[str]:
    """Decrement stock for ``(product_id, quantity)`` pairs; never below zero.

    Rows are locked in product-id order so concurrent buyers cannot deadlock. Returns the product
    ids that lacked stock (the caller then rolls the transaction back); [] on success.
    """
    merged: dict[str, int] = {}
    for pid, q in items:
        merged[pid] = merged.get(pid, 0) + q
    short: list[str] = []
    for pid in sorted(merged):
        done = await conn.fetchval(
            "UPDATE inventory SET quantity = quantity - $2 WHERE product_id = $1 AND quantity >= $2 RETURNING 1",
            pid,
            merged[pid],
        )
        if not done:
            short.append(pid)
    return short


async def insert_payment(conn: asyncpg.Connection, company_id: uuid.UUID, p: dict[str, Any]) -> None:
    await conn.execute(
        "INSERT INTO payments (company_id, id, checkout_id, order_id, handler_id, instrument_id, token_ref,"
        " amount, currency, status, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)",
        company_id,
        p["id"],
        p["checkout_id"],
        p.get("order_id"),
        p["handler_id"],
        p["instrument_id"],
        p["token_ref"],
        p["amount"],
        p["currency"],
        p["status"],
        p["created_at"],
    )


async def insert_event(conn: asyncpg.Connection, company_id: uuid.UUID, order_id: str, ev: dict[str, Any]) -> None:
    detail = {k: v for k, v in ev.items() if k not in ("id", "type", "occurred_at")}
    await conn.execute(
        "INSERT INTO order_events (company_id, order_id, id, type, occurred_at, detail) VALUES ($1,$2,$3,$4,$5,$6)",
        company_id,
        order_id,
        ev["id"],
        ev["type"],
        datetime.fromisoformat(ev["occurred_at"].replace("Z", "+00:00")),
        detail,
    )
    await conn.execute(
        "UPDATE orders SET updated_at = $2 WHERE id = $1",
        order_id,
        datetime.fromisoformat(ev["occurred_at"].replace("Z", "+00:00")),
    )


async def complete_order(
    conn: asyncpg.Connection,
    company_id: uuid.UUID,
    *,
    checkout: dict[str, Any],
    order: dict[str, Any],
    payment: dict[str, Any],
    outbox: dict[str, Any],
    reserve: tuple[str, int] | None = None,
    last_write: LastWrite | None = None,
    otherwise: Callable[[], Awaitable[Any]] | None = None,
) -> bool | None:
    """Write a completed checkout in one statement: the checkout row (status, state, body, order_id),
    the order, the captured payment and the ``order created`` outbox event with its queue entry.

    ``checkout``: ``status``, ``state``, ``body``, ``now`` (also the order's and the payment's
    timestamp). ``order``: ``id``, ``checkout_id``, ``caller``, ``currency``, ``total`` (minor
    units), ``snapshot``. ``payment``: ``id``, ``handler_id``, ``instrument_id``, ``token_ref``,
    ``status`` (amount and currency are the order's).
    ``outbox``: ``event_type``, ``caller``, ``payload``, ``target_url``, ``now``.
    ``reserve``: one ``(product_id, quantity)`` to take from stock in the same statement (never
    below zero, as :func:`reserve_inventory`); when the stock is short nothing at all is written.
    ``last_write``: the caller sends nothing after this statement and lets ``last_write`` run it
    (``VerbContext.write_last``: possibly later, with the audit row); ``otherwise`` (with
    ``reserve``): what the caller answers when the stock is short, should the statement be deferred.
    Returns: True when written, False when ``reserve`` found the stock short, None when deferred
    (``last_write`` runs it later and awaits ``otherwise`` when the stock is short).
    """
    body = json.dumps(outbox["payload"], separators=(",", ":"), sort_keys=False).encode()
    p, o = payment, order
    inv, cond, extra = "", "true", []
    if reserve is not None:
        inv = (
            "inv AS (UPDATE inventory SET quantity = quantity - $24 WHERE product_id = $23 AND quantity >= $24"
            " RETURNING 1), "
        )
        cond, extra = "EXISTS (SELECT 1 FROM inv)", [reserve[0], reserve[1]]
    # WITH items, then the last write (the queue entry): a row exactly when everything was written
    ctes = (
        f"{inv}cs AS (UPDATE checkout_sessions SET status = $2, state = $3, body = $4, updated_at = $5,"
        f"   order_id = $6 WHERE id = $7 AND {cond} RETURNING 1),"
        " oi AS (INSERT INTO orders (company_id, id, checkout_id, caller, currency, total, snapshot, created_at,"
        f"   updated_at) SELECT $1, $6, $7, $8, $9, $10, $11, $5, $5 WHERE {cond} RETURNING 1),"
        " pa AS (INSERT INTO payments (company_id, id, checkout_id, order_id, handler_id, instrument_id, token_ref,"
        "   amount, currency, status, created_at)"
        f"   SELECT $1, $12, $7, $6, $13, $14, $15, $10, $9, $16, $5 WHERE {cond} RETURNING 1),"
        " ob AS (INSERT INTO webhook_outbox (company_id, id, order_id, event_type, caller, payload, created_at,"
        f"   next_attempt_at, target_url) SELECT $1, $17, $6, $18, $19, $20, $21, $21, $22 WHERE {cond} RETURNING 1)"
    )
    sql = (
        f"INSERT INTO webhook_queue (company_id, event_id, next_attempt_at, receiver) SELECT $1, $17, $21, $19"
        f" WHERE {cond}"
    )
    args = (
        company_id,
        checkout["status"],
        checkout["state"],
        checkout["body"],
        checkout["now"],
        o["id"],
        o["checkout_id"],
        o["caller"],
        o["currency"],
        o["total"],
        o["snapshot"],
        p["id"],
        p["handler_id"],
        p["instrument_id"],
        p["token_ref"],
        p["status"],
        uuid.uuid4(),
        outbox["event_type"],
        outbox["caller"],
        body,
        outbox["now"],
        outbox.get("target_url"),
        *extra,
    )
    if last_write is not None:
        return await last_write(sql, *args, ctes=ctes, otherwise=otherwise if reserve is not None else None)
    return bool(await conn.fetchval(f"WITH {ctes} {sql} RETURNING true", *args))


async def get_order_rows(
    conn: asyncpg.Connection, order_id: str
) -> tuple[asyncpg.Record | None, list[asyncpg.Record], list[asyncpg.Record]]:
    """``(order, events in order, adjustments in order)``; order None when unknown."""
    order = await conn.fetchrow("SELECT * FROM orders WHERE id = $1", order_id)
    if order is None:
        return None, [], []
    events = await conn.fetch("SELECT * FROM order_events WHERE order_id = $1 ORDER BY seq", order_id)
    adjs = await conn.fetch("SELECT * FROM order_adjustments WHERE order_id = $1 ORDER BY seq", order_id)
    return order, list(events), list(adjs)


async def insert_outbox(
    conn: asyncpg.Connection,
    company_id: uuid.UUID,
    *,
    order_id: str,
    event_type: str,
    caller: str,
    payload: dict[str, Any],
    target_url: str | None = None,
    now: datetime,
) -> uuid.UUID:
    """Queue one order webhook in the caller's transaction (at-least-once delivery). Returns Webhook-Id."""
    event_id = uuid.uuid4()
    body = json.dumps(payload, separators=(",", ":"), sort_keys=False).encode()
    await conn.execute(
        "INSERT INTO webhook_outbox (company_id, id, order_id, event_type, caller, payload, created_at,"
        " next_attempt_at, target_url) VALUES ($1,$2,$3,$4,$5,$6,$7,$7,$8)",
        company_id,
        event_id,
        order_id,
        event_type,
        caller,
        body,
        now,
        target_url,
    )
    await conn.execute(
        "INSERT INTO webhook_queue (company_id, event_id, next_attempt_at, receiver) VALUES ($1,$2,$3,$4)",
        company_id,
        event_id,
        now,
        caller,  # the receiver: per-receiver fair delivery (commerce.webhook_queue)
    )
    return event_id

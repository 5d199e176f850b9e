"""UCP idempotency for POST/PUT (UCP checkout-rest.md, SIG "Replay Protection").

Scope: (company, caller, Idempotency-Key). The fingerprint covers the method, path, caller and raw
body bytes. The operation and its idempotency record commit in ONE transaction, serialised per key
by a transaction-level advisory lock, so concurrent duplicates execute once and a crash never leaves
an effect without its record. Replays return the stored status and exact body bytes. Records live
``ttl`` (>= 24 h). 5xx results are never stored; a store failure is a 503 (fail closed).

The key itself is checked by :func:`check_key`, the one rule of both bindings (the REST
``Idempotency-Key`` header, the MCP tools' ``meta["idempotency-key"]``): one key is accepted or
refused alike on either.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from ..errors import BadRequest, Conflict, GatewayError, ServiceUnavailable
from ..verbs.store import KEY_MAX_LENGTH, valid_key

__all__ = [
    "KEY_MAX_LENGTH",
    "IdempotencyConflict",
    "IdempotencyUnavailable",
    "Stored",
    "check_key",
    "fingerprint",
    "run_idempotent",
    "serialize",
]

JSON = "application/json"


class IdempotencyConflict(Conflict):
    """The key was used before with a different request (HTTP 409)."""

    code = "idempotency_key_reused"


class IdempotencyUnavailable(ServiceUnavailable):
    """The idempotency store could not be read or written (HTTP 503, fail closed)."""

    code = "idempotency_unavailable"


@dataclass(frozen=True)
class Stored:
    status: int
    content_type: str
    body: bytes
    replayed: bool = False


def check_key(key: object, *, name: str, required: bool = False) -> str | None:
    """The idempotency key of a UCP request, checked by the one rule of every binding: the REST
    binding passes its ``Idempotency-Key`` header (``name="Idempotency-Key"``), the MCP tools their
    ``meta["idempotency-key"]`` argument, so the same key is accepted or refused on both.

    A key passes :func:`ucp_gateway.verbs.store.valid_key` (1 to 128 printable characters), the
    rule of the verb dispatch door too. UCP checkout-rest.md names the ``Idempotency-Key`` header
    but sets no format; this is the rule the REST binding has always applied (an HTTP field value
    cannot carry most control characters anyway, a JSON string can).

    Args:
        key: the key as received; None when the request carries none.
        name: how the request names the key, for the error message.
        required: the operation needs a key (complete and cancel on MCP, complete on REST).
    Returns: the key, or None when there is none and none is required.
    Raises: BadRequest (400 ``invalid_request``) when the key is missing but required (an empty
        string counts as missing) or is not such a string.
    """
    if required and not key:
        raise BadRequest(f"{name} is required for this operation")
    if key is None:
        return None
    if not valid_key(key):
        raise BadRequest(f"{name} must be 1-{KEY_MAX_LENGTH} printable characters")
    return key


def serialize(body: dict) -> bytes:
    """The one serialisation of a response body (compact JSON, UTF-8)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(method: str, path: str, caller: str, raw_body: bytes) -> bytes:
    """SHA-256 over length-prefixed method, path, caller and the raw body bytes."""
    h = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), caller.encode(), raw_body):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


async def run_idempotent(
    conn: asyncpg.Connection,
    *,
    company_id: uuid.UUID,
    caller: str,
    key: str,
    fp: bytes,
    now: datetime,
    ttl: timedelta,
    op: Callable[[], Awaitable[Stored]],
) -> Stored:
    """Run ``op`` at most once per (company, caller, key) on ``conn`` (already in a transaction).

    Raises: IdempotencyConflict (409) on a different fingerprint; IdempotencyUnavailable (503) when the
    store fails. GatewayErrors from ``op`` with status < 500 are stored as their protocol-error body
    (``op`` raises those before its first write, see service.py); other exceptions propagate unstored.
    """
    try:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"{company_id}|{caller}|{key}")
        rec = await conn.fetchrow(
            "SELECT fingerprint, status_code, content_type, body, expires_at FROM commerce_idempotency"
            " WHERE caller = $1 AND key = $2",
            caller,
            key,
        )
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
        raise IdempotencyUnavailable("idempotency store unavailable") from exc
    if rec is not None and rec["expires_at"] > now:
        if not hmac.compare_digest(bytes(rec["fingerprint"]), fp):
            raise IdempotencyConflict("Idempotency-Key was already used with a different request")
        return Stored(rec["status_code"], rec["content_type"], bytes(rec["body"]), replayed=True)
    try:  # no savepoint: operations raise a 4xx only before their first write (service.py contract)
        result = await op()
    except GatewayError as exc:
        if exc.http_status >= 500:
            raise
        result = Stored(exc.http_status, JSON, serialize(exc.to_body()))
    if result.status >= 500:
        return result
    try:  # a failure aborts the transaction: the 503 propagates and nothing of ``op`` commits
        await conn.execute(
            "INSERT INTO commerce_idempotency (company_id, caller, key,"
            " fingerprint, status_code, content_type,"
            " body, created_at, expires_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)"
            " ON CONFLICT (company_id, caller, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,"
            " status_code = EXCLUDED.status_code, content_type ="
            " EXCLUDED.content_type, body = EXCLUDED.body,"
            " created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at",
            company_id,
            caller,
            key,
            fp,
            result.status,
            result.content_type,
            result.body,
            now,
            now + ttl,
        )
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
        raise IdempotencyUnavailable("idempotency store unavailable") from exc
    return result

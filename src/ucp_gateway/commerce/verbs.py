"""UCP shopping operations as verbs of the verb runtime: every REST call is a dispatch.

Verbs (surface ``ucp``, principal kind ``buyer`` only, sub-agent ``sales``)::

    checkout.create / checkout.update / checkout.cancel   WRITE_REVERSIBLE, no consent step
    checkout.complete                                     WRITE_FINANCIAL, consent = payment credential
    checkout.get / orders.get                             READ
    catalog.search / catalog.lookup / catalog.product     READ
    cart.create / cart.update / cart.cancel               WRITE_REVERSIBLE, no consent step
    cart.get                                              READ

The buyer agent's principal is ``Principal(kind="buyer", role="buyer", subject=<profile URL>)``:
never counted against company caps (architecture.md "Two kinds of principal"). Arguments carry the
HTTP method, path and raw body text, so the dispatcher's idempotency digest covers exactly what UCP
asks (raw body, method, path; caller = principal scope). The result carries the HTTP status and the
exact body text, so a replay is byte-identical. No call keeps its arguments in the audit row (a
body may hold a payment credential, on complete and also on create or update, and the buyer's
personal data; a REST GET may carry a body; the append-only chain cannot forget any of it): only
their digest is recorded, with the entity id.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from aiohttp import web

from ..appkeys import SETTINGS
from ..errors import GatewayError
from ..jsonbody import dumps_compact
from ..verbs.context import VerbContext
from ..verbs.decide import Call
from ..verbs.errors import RETRY_HINT, VerbError
from ..verbs.policy import BUYER_ROLE, Consent, Principal, PrincipalLimit, RiskClass, VerbPolicy
from ..verbs.registry import Registry
from ..verbs.runtime import VERBS
from . import carts, catalog_service, order_ops, service
from .service import CommerceContext, Outcome
from .validation import parse_json

__all__ = ["CURRENT", "VERB_OPS", "provide", "result_of", "run_verb", "verb_dispatcher", "wire_kind"]

#: The request's CommerceContext, set by the REST handler around the dispatch (same task).
CURRENT: contextvars.ContextVar[CommerceContext] = contextvars.ContextVar("ucpgw_commerce_ctx")

Op = Callable[[asyncpg.Connection, CommerceContext, dict[str, Any]], Awaitable[Outcome]]


def _body(args) -> dict[str, Any]:
    text = args.get("body_text", "")
    # ASCII text without NUL: its UTF-8 bytes are the same characters, so the text is parsed without
    # the round trip; anything else goes as UTF-8 bytes, where loads_strict refuses a NUL (UTF-16/32)
    if type(text) is str and text and text.isascii() and "\x00" not in text:
        return parse_json(text)
    return parse_json(text.encode())


async def _cart_cancel(conn: asyncpg.Connection, ctx: CommerceContext, args: dict[str, Any]) -> Outcome:
    _body(args)  # as checkout cancel: a body sent must be a JSON object
    return await carts.cancel(conn, ctx, args["id"])


async def _cancel(conn: asyncpg.Connection, ctx: CommerceContext, args: dict[str, Any]) -> Outcome:
    _body(args)  # cancel reads no field, but a body sent must still be a JSON object (400 otherwise)
    return await service.cancel(conn, ctx, args["id"])


VERB_OPS: dict[str, tuple[RiskClass, Op]] = {
    "checkout.create": (RiskClass.WRITE_REVERSIBLE, lambda c, x, a: carts.create_checkout(c, x, _body(a))),
    "checkout.get": (RiskClass.READ, lambda c, x, a: service.get(c, x, a["id"])),
    "checkout.update": (RiskClass.WRITE_REVERSIBLE, lambda c, x, a: service.update(c, x, a["id"], _body(a))),
    "checkout.complete": (RiskClass.WRITE_FINANCIAL, lambda c, x, a: service.complete(c, x, a["id"], _body(a))),
    "checkout.cancel": (RiskClass.WRITE_REVERSIBLE, _cancel),
    "orders.get": (RiskClass.READ, lambda c, x, a: order_ops.get_order(c, x, a["id"])),
    "catalog.search": (RiskClass.READ, lambda c, x, a: catalog_service.search(c, x, _body(a))),
    "catalog.lookup": (RiskClass.READ, lambda c, x, a: catalog_service.lookup(c, x, _body(a))),
    "catalog.product": (RiskClass.READ, lambda c, x, a: catalog_service.get_product(c, x, _body(a))),
    "cart.create": (RiskClass.WRITE_REVERSIBLE, lambda c, x, a: carts.create(c, x, _body(a))),
    "cart.get": (RiskClass.READ, lambda c, x, a: carts.get(c, x, a["id"])),
    "cart.update": (RiskClass.WRITE_REVERSIBLE, lambda c, x, a: carts.update(c, x, a["id"], _body(a))),
    "cart.cancel": (RiskClass.WRITE_REVERSIBLE, lambda c, x, a: _cart_cancel(c, x, a)),
}
#: the verbs whose arguments carry the resource ``id`` (a path parameter / MCP ``arguments.id``)
_WITH_ID = frozenset({"checkout.get", "checkout.update", "checkout.complete", "checkout.cancel", "orders.get",
                      "cart.get", "cart.update", "cart.cancel"})  # fmt: skip
_ENTITY = {"checkout": "checkout_session", "orders": "order", "catalog": "catalog", "cart": "cart"}
_KIND = {"checkout": "checkout", "orders": "order", "catalog": "catalog", "cart": "cart"}


def wire_kind(verb: str) -> str:
    """The response's wire shape kind (``ucp_gateway.versions``) of a shopping verb."""
    return _KIND[verb.split(".")[0]]


_DESCRIPTIONS = {
    "checkout.create": "UCP create_checkout: price the line items from the catalogue and open a checkout session.",
    "checkout.get": "UCP get_checkout: the latest state of a checkout session.",
    "checkout.update": "UCP update_checkout: replace the writable state (items, buyer, fulfillment, discounts).",
    "checkout.complete": "UCP complete_checkout: charge the payment credential, reserve stock, create the order.",
    "checkout.cancel": "UCP cancel_checkout: cancel a checkout session that is not completed.",
    "orders.get": "UCP get_order: the full order with fulfillment events and adjustments.",
    "catalog.search": "UCP search_catalog: ranked full-text product search with filters and cursor pages.",
    "catalog.lookup": "UCP lookup_catalog: products by product or variant id, SKU, GTIN or handle.",
    "catalog.product": "UCP get_product: one product with its variants and option availability.",
    "cart.create": "UCP create_cart: a cart priced from the catalogue (estimated totals).",
    "cart.get": "UCP get_cart: the cart, priced now.",
    "cart.update": "UCP update_cart: replace the cart's contents (full replacement).",
    "cart.cancel": "UCP cancel_cart: delete the cart; answers its state before deletion.",
}


def result_of(out: Outcome, *, read: bool, entity: str) -> dict[str, Any]:
    """The verb output for an Outcome: ``http_status`` + exact ``body`` text (+ the shape's fields).

    The text is compact JSON (jsonbody.dumps_compact: the bytes of ``idempotency.serialize``, written
    faster); a replay returns it exactly as stored."""
    res: dict[str, Any] = {"http_status": out.status, "body": dumps_compact(out.body).decode()}
    if read:
        res.update(entity_id=entity, entity_type="ucp_resource", data={"http_status": out.status})
    return res


def _handler(name: str, op: Op, read: bool):
    entity_type = _ENTITY[name.split(".")[0]]
    kind = wire_kind(name)

    async def handler(ctx: VerbContext) -> dict[str, Any]:
        cctx = CURRENT.get(None)
        if cctx is None:  # a guard: the dispatcher runs these only for Call(binding="ucp") (run_verb)
            raise VerbError("surface_not_allowed", "UCP shopping verbs are called through /ucp/v1 or the UCP MCP tools")
        if not read:  # the operation's last write goes out with the audit row (one round trip)
            cctx = cctx.with_last_write(ctx.write_last)
        args = ctx.args if type(ctx.args) is dict else dict(ctx.args)  # the dispatcher's own copy
        out = service.wire(await _run(op, ctx.conn, cctx, args), cctx, kind)
        entity = args.get("id") or (out.body.get("id") if isinstance(out.body, dict) else None) or "-"
        ctx.set_entity(entity_type, str(entity))
        fallback = ctx.otherwise
        if fallback is not None:  # a deferred guarded last write: its fallback answers an Outcome
            ctx.otherwise = lambda: _answer(fallback, str(entity), cctx, kind)
        return result_of(out, read=read, entity=str(entity))

    return handler


async def _run(op: Callable[..., Awaitable[Outcome]], *args: Any) -> Outcome:
    try:
        # no savepoint: operations raise 4xx only before their first write (service.py contract)
        return await op(*args)
    except GatewayError as exc:
        if exc.http_status >= 500:
            raise
        return Outcome(exc.http_status, exc.to_body())


async def _answer(
    fallback: Callable[[], Awaitable[Any]], entity: str, cctx: CommerceContext, kind: str
) -> dict[str, Any]:
    """The handler's result from an operation's write_last ``otherwise`` (an Outcome)."""
    return result_of(service.wire(await _run(fallback), cctx, kind), read=False, entity=entity)


def provide(registry: Registry, *, daily_completes: int | None = None) -> None:
    """Register the shopping verbs on ``registry``."""
    for name, (cls, op) in VERB_OPS.items():
        read = cls is RiskClass.READ
        props: dict[str, Any] = {
            "method": {"type": "string"},
            "path": {"type": "string"},
            "body_text": {"type": "string", "maxLength": 1_048_576},
            "raw_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        }
        required = []
        if name in _WITH_ID:
            props["id"] = {"type": "string", "minLength": 1, "maxLength": 200}
            required.append("id")
        policy = VerbPolicy(
            cls,
            consent=Consent.PAYMENT_CREDENTIAL
            if cls is RiskClass.WRITE_FINANCIAL
            else Consent.NONE
            if not read
            else None,
            principals=frozenset({"buyer"}),
            subagent="sales",
            # a body may hold a payment credential (also on create and update: UCP lets instruments
            # ride along) and the buyer's personal data, and a REST read may carry a body too; the
            # audit chain can never forget any of it (the entity id is recorded anyway)
            audit_args=False,
            # UCP: the key is the caller's, not the operation's: reused for another operation
            # (create's key on an update, or on MCP) it is a conflict, never a second execution
            idempotency_scope="ucp",
            # run only by the UCP REST routes and MCP tools (run_verb), which set CURRENT: every
            # generic door refuses them (surface_not_allowed) and lists no tool for them
            binding="ucp",
            principal_limit=PrincipalLimit(calls=daily_completes)
            if name == "checkout.complete" and daily_completes
            else None,
        )
        record = {
            "name": name,
            "description": _DESCRIPTIONS[name],
            "shape": "aggregate" if read else "receipt",
            "surfaces": ["ucp"],
            "side_effects": "read" if read else "write",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": props,
                "required": required,
            },
        }
        registry.register(record, policy, _handler(name, op, read))


def envelope_body(env: dict[str, Any]) -> tuple[int, bytes] | None:
    """``(status, body bytes)`` of a successful envelope, else None."""
    if not env.get("ok"):
        return None
    res = env["result"]
    return int(res["http_status"]), res["body"].encode()


_REASON_STATUS = {
    "idempotency_conflict": (409, "idempotency_key_reused"),
    "principal_limit_exceeded": (429, "rate_limited"),
    "daily_cap_exceeded": (429, "rate_limited"),
    "invalid_arguments": (400, "invalid_request"),
    "execution_failed": (503, "unavailable"),
}


def envelope_error(env: dict[str, Any]) -> tuple[int, bytes]:
    """Map a refused/failed envelope to a UCP protocol error ``(status, {"code","content"} bytes)``.
    ``execution_failed`` is 503 ``unavailable`` (the bindings add Retry-After) only when the runtime
    marked it transient (verbs.errors.RETRY_HINT); any other is an internal fault, 500
    ``internal_error``: a retry would fail again, so none is invited."""
    err = env.get("error") or {}
    status, code = _REASON_STATUS.get(err.get("reason", ""), (403, err.get("reason", "forbidden")))
    if err.get("reason") == "execution_failed" and err.get("hint") != RETRY_HINT:
        status, code = 500, "internal_error"
    return status, json.dumps({"code": code, "content": err.get("message", "")}, separators=(",", ":")).encode()


def verb_dispatcher(app: web.Application):  # -> verbs.dispatcher.Dispatcher | None
    """The verb runtime's dispatcher when UCP operations run through it (every binding: REST here,
    the MCP tools in transports.ucp_tools), else None (``commerce_via_verbs=false``, development only)."""
    runtime = app.get(VERBS)
    if app[SETTINGS].commerce_via_verbs and runtime is not None and runtime.dispatcher is not None:
        return runtime.dispatcher
    return None


async def run_verb(
    dispatcher, company, caller: str, ctx: CommerceContext, verb: str, args: dict, key: str | None
) -> tuple[int, bytes, bool]:
    """Dispatch the UCP operation ``verb`` (commerce.verbs.VERB_OPS) for the buyer agent ``caller``:
    audited, idempotent under ``key`` (its digest covers ``args``: method, path, body text, raw hash),
    capped per buyer. Returns ``(HTTP status, body bytes, replayed)``; a refusal or failure is the
    UCP protocol error (commerce.verbs.envelope_error)."""
    principal = Principal("buyer", company.id, BUYER_ROLE, caller, "ucp")
    token = CURRENT.set(ctx)
    try:
        call = Call(verb, args, idempotency_key=key, binding="ucp")  # the binding's own call (VerbPolicy.binding)
        env = await dispatcher.dispatch(principal, call, company=company)
    finally:
        CURRENT.reset(token)
    ok = envelope_body(env)
    status, body = ok if ok is not None else envelope_error(env)
    return status, body, bool(env.get("replayed"))

"""The UCP shopping tools of the MCP binding (UCP checkout-mcp.md, order-mcp.md), on the same verb
runtime (audit, idempotency store, per-buyer limits), negotiation and rate limiter as the REST binding.

Tools: ``create_checkout``, ``get_checkout``, ``update_checkout``, ``complete_checkout``,
``cancel_checkout``, ``get_order``. Arguments: ``meta`` (required on all: ``{"ucp-agent":
{"profile": url}, "idempotency-key"?}``; the key is required for complete and cancel and follows the
REST ``Idempotency-Key`` rule, commerce.idempotency.check_key), ``id`` for
the resource, ``checkout`` for the payload (it must not contain ``id``; required on create, update
and complete), described by the served version's UCP request schema (:mod:`.ucp_schemas`). The UCP
payload is the result's ``structuredContent`` (plus a text copy); business outcomes, the error
envelope included, are results; protocol errors (negotiation, idempotency conflict, rate limit) are
JSON-RPC errors. The ``outputSchema`` is what a checkout, an order and the error envelope share.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

import asyncpg

from ..appkeys import DATABASE, SETTINGS
from ..commerce import carts, catalog_service, order_ops, service
from ..commerce.budget import spend_buyer_budget
from ..commerce.context import UNVERIFIED, build_context, caller_of, negotiate, require_access
from ..commerce.idempotency import JSON, KEY_MAX_LENGTH, Stored, check_key, fingerprint, run_idempotent, serialize
from ..commerce.verbs import run_verb, verb_dispatcher
from ..db import tenant_tx
from ..errors import BadRequest, GatewayError
from ..jsonbody import dumps_compact
from .ucp_mcp import McpCall, McpTool
from .ucp_schemas import UCP_RESULT_SCHEMA, checkout_argument, payload_argument

__all__ = ["UCP_TOOL_NAMES", "ucp_tools"]

UCP_TOOL_NAMES = ("create_checkout", "get_checkout", "update_checkout", "complete_checkout", "cancel_checkout",
                  "get_order", "search_catalog", "lookup_catalog", "get_product", "create_cart", "get_cart",
                  "update_cart", "cancel_cart")  # fmt: skip
_READ_ONLY = frozenset({"get_checkout", "get_order", "search_catalog", "lookup_catalog", "get_product", "get_cart"})

_META = {
    "type": "object",
    "properties": {
        "ucp-agent": {"type": "object", "properties": {"profile": {"type": "string"}}, "required": ["profile"]},
        # and printable characters only (commerce.idempotency.check_key: the REST rule)
        "idempotency-key": {"type": "string", "minLength": 1, "maxLength": KEY_MAX_LENGTH},
    },
    "required": ["ucp-agent"],
}
_META_KEYED = {**_META, "required": ["ucp-agent", "idempotency-key"]}
_ID = {"type": "string", "minLength": 1}

Op = Callable[[asyncpg.Connection, Any, Mapping[str, Any]], Awaitable[service.Outcome]]


def _schema(*, keyed: bool = False, id_: bool = False, checkout: str | None = None) -> dict[str, Any]:
    """A tool's ``inputSchema``: ``meta``, ``id`` when ``id_``, and ``checkout`` as the UCP request
    schema of operation ``checkout`` (create / update / complete) when given."""
    props: dict[str, Any] = {"meta": _META_KEYED if keyed else _META}
    req = ["meta"]
    out: dict[str, Any] = {"type": "object"}
    if id_:
        props["id"], req = _ID, [*req, "id"]
    if checkout:
        body, defs = checkout_argument(checkout)
        props["checkout"], req = {**body, "description": "The UCP checkout payload (without id)."}, [*req, "checkout"]
        out["$defs"] = defs
    return {**out, "properties": props, "required": req}


def _payload_schema(arg: str, operation: str, *, keyed: bool = False, id_: bool = False) -> dict[str, Any]:
    """The ``inputSchema`` of a catalog or cart tool: ``meta``, ``id`` when ``id_``, and the payload
    ``arg`` (``catalog`` / ``cart``) as the UCP request schema of ``operation``."""
    body, defs = payload_argument(operation)
    props: dict[str, Any] = {"meta": _META_KEYED if keyed else _META}
    req = ["meta"]
    if id_:
        props["id"], req = _ID, [*req, "id"]
    props[arg], req = {**body, "description": f"The UCP {arg} payload."}, [*req, arg]
    return {"type": "object", "$defs": defs, "properties": props, "required": req}


def _payload(name: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The reader of ``arguments.<name>`` (an object; a cart object must not contain ``id``)."""

    def read(args: Mapping[str, Any]) -> dict[str, Any]:
        data = args.get(name)
        if not isinstance(data, dict):
            raise BadRequest(f"arguments.{name} must be an object")
        if name == "cart" and "id" in data:
            raise BadRequest("arguments.cart must not contain id (pass it as arguments.id)")
        return data

    return read


_catalog_arg, _cart_arg = _payload("catalog"), _payload("cart")


def _checkout_arg(args: Mapping[str, Any]) -> dict[str, Any]:
    data = args.get("checkout")
    if not isinstance(data, dict):
        raise BadRequest("arguments.checkout must be an object")
    if "id" in data:
        raise BadRequest("arguments.checkout must not contain id (pass it as arguments.id)")
    return data


def _id_arg(args: Mapping[str, Any]) -> str:
    v = args.get("id")
    if not isinstance(v, str) or not v or len(v) > 200:
        raise BadRequest("arguments.id must be a non-empty string")
    return v


def _stored_error(stored: Stored) -> GatewayError:
    try:
        body = json.loads(stored.body)
    except ValueError:
        body = {}
    exc = GatewayError(str(body.get("content", "")), code=str(body.get("code", "error")))
    exc.http_status = stored.status  # type: ignore[misc]  # the stored protocol error's status
    return exc


async def _agent(call: McpCall):
    from ..discovery.agent_header import agent_from_meta

    s = call.request.app[SETTINGS]
    hosts = frozenset(h.lower() for h in s.dev_profile_hosts) if s.dev_mode else frozenset()
    return agent_from_meta(call.arguments.get("meta") if isinstance(call.arguments.get("meta"), Mapping) else None,
                           http_hosts=hosts)  # fmt: skip


#: negotiation operation -> access-table operation (levels.OPERATIONS)
_ACCESS_OPERATION = {"order": "orders", "dev.ucp.shopping.catalog.search": "catalog",
                     "dev.ucp.shopping.catalog.lookup": "catalog"}  # fmt: skip


def _kind(verb: str) -> str:
    """The wire-shape kind (``ucp_gateway.versions``) of a verb's responses."""
    return {"checkout": "checkout", "orders": "order", "catalog": "catalog", "cart": "cart"}[verb.split(".")[0]]


def _tool(name: str, verb: str, operation: str, op: Op, schema: dict[str, Any], description: str, *,
          keyed: bool = False, sign: bool = False, body: Callable[[Mapping[str, Any]], Any] | None = None,
          ) -> McpTool:  # fmt: skip
    """One tool. It runs the verb ``verb`` through the verb runtime, as the REST binding does (audited,
    idempotent under ``meta["idempotency-key"]``, capped per buyer): its arguments are the method
    ``MCP``, the tool name as path, ``body(arguments)`` as the body text (reads: none) and ``id``.
    ``op`` is the direct path of ``commerce_via_verbs=false`` (development only). ``sign``: every
    response to a call is signed (:attr:`.ucp_mcp.McpTool.signed`; ``tools/call`` asks for it)."""

    async def run(call: McpCall) -> Mapping[str, Any]:
        request, company, args = call.request, call.company, call.arguments
        # the REST binding's rule: before any profile fetch; a checkout tool's id may be a continuation
        cid = args.get("id") if verb.startswith("checkout.") else None
        await spend_buyer_budget(request, company, checkout_id=cid if isinstance(cid, str) else None)
        agent = await _agent(call)
        neg = await negotiate(request, company, operation, agent=agent)
        try:
            caller = caller_of(request, neg)
        except BadRequest:  # no UCP-Agent header and nothing negotiated: the profile named in meta
            caller = UNVERIFIED + agent.profile  # caller_of returns a verified signer's without raising
        ctx = build_context(request, company, caller, neg)
        # the company's access table (levels.py): orders need identified by default (UCP order.md:
        # Get Order MUST be authenticated); complete hands off inside the operation instead
        require_access(ctx, _ACCESS_OPERATION.get(operation, operation))
        # the REST binding's Idempotency-Key rule (one key is accepted or refused alike on both)
        key = check_key(args["meta"].get("idempotency-key"), name='meta["idempotency-key"]', required=keyed)
        settings = request.app[SETTINGS]
        dispatcher = verb_dispatcher(request.app)
        if dispatcher is not None:
            text = "" if body is None else dumps_compact(body(args)).decode()
            vargs: dict[str, Any] = {"method": "MCP", "path": name, "body_text": text,
                                     "raw_sha256": hashlib.sha256(text.encode()).hexdigest()}  # fmt: skip
            if "id" in schema["properties"]:
                vargs["id"] = _id_arg(args)
            status, raw, _ = await run_verb(dispatcher, company, caller, ctx, verb, vargs, key)
            if status >= 400:
                raise _stored_error(Stored(status, JSON, raw))
            return json.loads(raw)

        async def once(conn: asyncpg.Connection) -> Stored:
            out = service.wire(await op(conn, ctx, args), ctx, _kind(verb))
            return Stored(out.status, JSON, serialize(out.body))

        async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
            if key:
                payload = serialize({k: v for k, v in args.items() if k != "meta"})
                stored = await run_idempotent(
                    conn, company_id=company.id, caller=caller, key=key,
                    fp=fingerprint("MCP", name, caller, payload), now=ctx.now,
                    ttl=timedelta(seconds=settings.commerce_idempotency_ttl), op=lambda: once(conn),
                )  # fmt: skip
            else:
                stored = await once(conn)
        if stored.status >= 400:
            raise _stored_error(stored)
        return json.loads(stored.body)

    definition = {"name": name, "description": description, "inputSchema": schema, "outputSchema": UCP_RESULT_SCHEMA,
                  "annotations": {"readOnlyHint": name in _READ_ONLY, "openWorldHint": False}}  # fmt: skip
    return McpTool(definition, run, signed=sign)


def ucp_tools() -> dict[str, McpTool]:
    """The UCP shopping tools (checkout, order, catalog, cart), by name."""

    tools = [
        _tool("create_checkout", "checkout.create", "checkout",
              lambda c, ctx, a: carts.create_checkout(c, ctx, _checkout_arg(a)),
              _schema(checkout="create"), "Create a checkout session (UCP checkout.md Create).", body=_checkout_arg),
        _tool("get_checkout", "checkout.get", "checkout", lambda c, ctx, a: service.get(c, ctx, _id_arg(a)),
              _schema(id_=True), "Get a checkout session by id."),
        _tool("update_checkout", "checkout.update", "checkout",
              lambda c, ctx, a: service.update(c, ctx, _id_arg(a), _checkout_arg(a)),
              _schema(id_=True, checkout="update"), "Replace the writable state of a checkout session.",
              body=_checkout_arg),
        _tool("complete_checkout", "checkout.complete", "checkout",
              lambda c, ctx, a: service.complete(c, ctx, _id_arg(a), _checkout_arg(a)),
              _schema(keyed=True, id_=True, checkout="complete"),
              "Complete a checkout with payment (checkout.payment.instruments); returns it with the order.",
              keyed=True, sign=True, body=_checkout_arg),
        _tool("cancel_checkout", "checkout.cancel", "checkout", lambda c, ctx, a: service.cancel(c, ctx, _id_arg(a)),
              _schema(keyed=True, id_=True), "Cancel a checkout session.", keyed=True, body=lambda a: {}),
        _tool("get_order", "orders.get", "order", lambda c, ctx, a: order_ops.get_order(c, ctx, _id_arg(a)),
              _schema(id_=True), "Get an order by id (UCP order.md)."),
        _tool("search_catalog", "catalog.search", "dev.ucp.shopping.catalog.search",
              lambda c, ctx, a: catalog_service.search(c, ctx, _catalog_arg(a)), _payload_schema("catalog", "search"),
              "Search the shop's products (UCP catalog search): query, filters (categories, price, available), "
              "pagination.cursor.", body=_catalog_arg),
        _tool("lookup_catalog", "catalog.lookup", "dev.ucp.shopping.catalog.lookup",
              lambda c, ctx, a: catalog_service.lookup(c, ctx, _catalog_arg(a)), _payload_schema("catalog", "lookup"),
              "Look products up by product or variant id, SKU, GTIN or handle (catalog.ids).", body=_catalog_arg),
        _tool("get_product", "catalog.product", "dev.ucp.shopping.catalog.lookup",
              lambda c, ctx, a: catalog_service.get_product(c, ctx, _catalog_arg(a)),
              _payload_schema("catalog", "product"),
              "One product with its variants and option availability (catalog.id, catalog.selected).",
              body=_catalog_arg),
        _tool("create_cart", "cart.create", "cart", lambda c, ctx, a: carts.create(c, ctx, _cart_arg(a)),
              _payload_schema("cart", "cart_create"), "Create a cart (UCP cart); totals are estimates.",
              body=_cart_arg),
        _tool("get_cart", "cart.get", "cart", lambda c, ctx, a: carts.get(c, ctx, _id_arg(a)),
              _schema(id_=True), "Get a cart by id."),
        _tool("update_cart", "cart.update", "cart", lambda c, ctx, a: carts.update(c, ctx, _id_arg(a), _cart_arg(a)),
              _payload_schema("cart", "cart_update", id_=True), "Replace a cart's contents (full replacement).",
              body=_cart_arg),
        _tool("cancel_cart", "cart.cancel", "cart", lambda c, ctx, a: carts.cancel(c, ctx, _id_arg(a)),
              _schema(keyed=True, id_=True), "Cancel (delete) a cart; returns its last state.", keyed=True,
              body=lambda a: {}),
    ]  # fmt: skip
    return {t.definition["name"]: t for t in tools}

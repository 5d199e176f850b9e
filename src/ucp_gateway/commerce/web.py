"""REST binding of UCP shopping (UCP checkout-rest.md, order-rest.md) and its wiring: ``setup(app)``.

Routes (under :data:`REST_PREFIX`, the rest ``endpoint`` path the company profile advertises)::

    POST /checkout-sessions                   201 checkout | 200 error envelope
    GET  /checkout-sessions/{id}              200
    PUT  /checkout-sessions/{id}              200 (full replacement) | 409 when terminal
    POST /checkout-sessions/{id}/complete     200 (Idempotency-Key required; response signed) | 409
    POST /checkout-sessions/{id}/cancel       200 | 409
    GET  /orders/{id}                         200
    POST /catalog/search | /catalog/lookup | /catalog/product   200 (UCP catalog rest.md)
    POST /carts                               201 cart | 200 error envelope (UCP cart rest.md)
    GET  /carts/{id}  PUT /carts/{id}  POST /carts/{id}/cancel   200
    (a POST/PUT body not labelled ``application/json`` is 415 ``unsupported_media_type``)
    POST /testing/simulate-shipping/{id}      (server root; only with a simulation secret)

Per request: company (tenancy) -> negotiation (discovery: UCP-Agent, platform profile, capability
intersection) -> caller (verified signature principal, else the negotiated profile URL) -> buyer
rate limit (:mod:`.budget`) -> one tenant transaction (with the idempotency record for POST/PUT carrying a key).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from datetime import timedelta

import asyncpg
from aiohttp import web

from .. import metrics
from ..access.ratelimit import SharedLimiter
from ..appkeys import DATABASE, REQ_RAW_BODY, SETTINGS
from ..db import tenant_tx
from ..errors import BadRequest, Forbidden, GatewayError
from ..httpsig.messages import decoded_body
from ..httpsig.web import mark_for_signing
from ..jsonbody import NOT_UTF8, dumps_compact
from ..mediatype import DECODED_CODINGS, require_json_body
from ..verbs.web import VERBS as VERBS_KEY
from . import order_ops, service, slo, staff
from .budget import BUYER_LIMITER, spend_buyer_budget
from .context import (
    PROFILE_CACHE,
    build_context,
    caller_of,
    company_of,
    negotiate,
    require_access,
)
from .idempotency import JSON, Stored, check_key, fingerprint, run_idempotent, serialize
from .verbs import VERB_OPS, run_verb, verb_dispatcher, wire_kind

__all__ = ["REST_PREFIX", "ROUTES", "SIMULATE_PATH", "setup", "spend_buyer_budget"]

REST_PREFIX = "/ucp/v1"  # = discovery.builder.REST_PATH (the advertised rest endpoint path)
SIMULATE_PATH = "/testing/simulate-shipping/{order_id}"


def _checkout_id(request: web.Request, verb: str) -> str | None:
    return request.match_info.get("id") if verb.startswith("checkout.") else None


def _response(stored: Stored) -> web.Response:
    resp = web.Response(status=stored.status, body=stored.body, content_type=stored.content_type.split(";")[0])
    if stored.replayed:
        resp.headers["Idempotent-Replayed"] = "true"
    return resp


def _error(exc: GatewayError) -> web.Response:
    resp = web.Response(status=exc.http_status, body=serialize(exc.to_body()), content_type=JSON)
    if exc.http_status in (429, 503):
        resp.headers["Retry-After"] = str(exc.details.get("retry_after", 1))
    return resp


async def _dispatch(request: web.Request, verb: str, *, operation: str, require_key: bool = False) -> web.Response:
    """Run one UCP operation: through the verb runtime (audited, idempotent per verb) when it is set
    up, else directly with this module's own idempotency record (``commerce_via_verbs=false``)."""
    app = request.app
    try:
        company = await company_of(request)
        # before any profile fetch; a request on a checkout session may be its continuation
        await spend_buyer_budget(request, company, checkout_id=_checkout_id(request, verb))
        neg = await negotiate(request, company, operation)
        caller = caller_of(request, neg)
        ctx = build_context(request, company, caller, neg)
        if operation == "order":
            require_access(ctx, "orders")  # UCP order.md: Get Order MUST be authenticated
        raw = request.get(REQ_RAW_BODY)
        if raw is None:
            raw = await request.read()
        if request.method in ("POST", "PUT"):
            # UCP REST bodies are application/json, raw or in a coding decoded here: 415 otherwise
            require_json_body(request, raw, codings=DECODED_CODINGS)
        # the one key rule of both bindings (the MCP tools check meta["idempotency-key"] with it)
        key = check_key(request.headers.get("Idempotency-Key"), name="Idempotency-Key", required=require_key)
        # a body that is not UTF-8 (RFC 8259 §8.1) is refused here, before the verb runtime (which
        # would store the refusal under the Idempotency-Key); a NUL byte is UTF-8 but never JSON,
        # and is how UTF-16/32 bodies of ASCII text look
        body = _decoded(request, raw)
        if b"\x00" in body:
            raise BadRequest(NOT_UTF8)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(NOT_UTF8) from None
        # the verb digest covers method, path, the decoded body and the raw bytes' hash (UCP:
        # fingerprint over the raw body); the caller is the principal's idempotency scope
        args = {
            "method": request.method,
            "path": request.path,
            "body_text": text,
            "raw_sha256": hashlib.sha256(raw).hexdigest(),
        }
        if "id" in request.match_info:
            args["id"] = request.match_info["id"]
        dispatcher = verb_dispatcher(app)
        if dispatcher is not None:
            status, body, replayed = await run_verb(dispatcher, company, caller, ctx, verb, args, key)
            resp = web.Response(status=status, body=body, content_type=JSON)
            if replayed:
                resp.headers["Idempotent-Replayed"] = "true"
            if status == 503:
                resp.headers["Retry-After"] = "1"
            return resp
        return await _direct(request, company, caller, ctx, verb, args, key, raw)
    except GatewayError as exc:
        return _error(exc)


async def _direct(request, company, caller, ctx, verb, args, key, raw) -> web.Response:
    op = VERB_OPS[verb][1]
    kind = wire_kind(verb)  # the response's wire shape (a cart or catalog body is no order)

    async def run(conn: asyncpg.Connection) -> Stored:
        out = service.wire(await op(conn, ctx, args), ctx, kind)
        return Stored(out.status, JSON, dumps_compact(out.body))  # as the verb path writes bodies

    settings = request.app[SETTINGS]
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        if key and request.method in ("POST", "PUT"):
            stored = await run_idempotent(
                conn,
                company_id=company.id,
                caller=caller,
                key=key,
                fp=fingerprint(request.method, request.path, caller, raw),
                now=ctx.now,
                ttl=timedelta(seconds=settings.commerce_idempotency_ttl),
                op=lambda: run(conn),
            )
        else:
            stored = await run(conn)
    return _response(stored)


#: The UCP REST routes (under :data:`REST_PREFIX`): (method, path, verb, negotiated operation, UCP
#: operation name for metrics and the SLO view). complete_checkout needs an Idempotency-Key and is
#: signed (UCP signatures.md: SHOULD); every other route dispatches the same way.
ROUTES: tuple[tuple[str, str, str, str, str], ...] = (
    ("POST", "/checkout-sessions", "checkout.create", "checkout", "create_checkout"),
    ("GET", "/checkout-sessions/{id}", "checkout.get", "checkout", "get_checkout"),
    ("PUT", "/checkout-sessions/{id}", "checkout.update", "checkout", "update_checkout"),
    ("POST", "/checkout-sessions/{id}/complete", "checkout.complete", "checkout", "complete_checkout"),
    ("POST", "/checkout-sessions/{id}/cancel", "checkout.cancel", "checkout", "cancel_checkout"),
    ("GET", "/orders/{id}", "orders.get", "order", "get_order"),
    ("POST", "/catalog/search", "catalog.search", "dev.ucp.shopping.catalog.search", "search_catalog"),
    ("POST", "/catalog/lookup", "catalog.lookup", "dev.ucp.shopping.catalog.lookup", "lookup_catalog"),
    ("POST", "/catalog/product", "catalog.product", "dev.ucp.shopping.catalog.lookup", "get_product"),
    ("POST", "/carts", "cart.create", "cart", "create_cart"),
    ("GET", "/carts/{id}", "cart.get", "cart", "get_cart"),
    ("PUT", "/carts/{id}", "cart.update", "cart", "update_cart"),
    ("POST", "/carts/{id}/cancel", "cart.cancel", "cart", "cancel_cart"),
)
_SIGNED = frozenset({"checkout.complete"})  # Idempotency-Key required, response signed


def _route_handler(verb: str, operation: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler of one UCP REST route: :func:`_dispatch` of ``verb``."""
    signed = verb in _SIGNED

    async def handler(request: web.Request) -> web.Response:
        if signed:
            _sign_response(request)
        return await _dispatch(request, verb, operation=operation, require_key=signed)

    handler.__name__ = verb.replace(".", "_")
    return handler


def _decoded(request: web.Request, raw: bytes) -> bytes:
    """The body with its Content-Encoding undone (request decompression is off app-wide so that
    Content-Digest covers the bytes as sent); the signatures package does the decoding. Decoded, it
    may be no larger than a plain body (``client_max_size``): a 10 kB gzip body of 10 MB cost the
    CPU of ten largest plain ones before being refused."""
    if request.headers.get("Content-Encoding", "identity").strip().lower() in ("", "identity"):
        return raw
    return decoded_body(request, limit=request.app[SETTINGS].client_max_size)


def _sign_response(request: web.Request) -> None:
    """complete_checkout responses SHOULD be signed (UCP signatures.md): ask the signature layer."""
    mark_for_signing(request)


async def simulate_shipping(request: web.Request) -> web.Response:
    """Test hook: add a ``shipped`` event and emit the order-updated webhook. 403 without the secret."""
    secret = request.app[SETTINGS].simulation_secret
    given = request.headers.get("Simulation-Secret", "")
    if secret is None or not hmac.compare_digest(given.encode(), secret.get_secret_value().encode()):
        return _error(Forbidden("Simulation-Secret missing or wrong"))
    try:
        company = await company_of(request)
        ctx = build_context(request, company, "", None)
        async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
            out = await order_ops.simulate_shipping(conn, ctx, request.match_info["order_id"])
        return _response(Stored(out.status, JSON, serialize(out.body)))
    except GatewayError as exc:
        return _error(exc)


def setup(app: web.Application) -> None:
    """Add the shopping routes, the buyer rate limiter (:mod:`.budget`, shared through the database)
    and (``settings.webhook_worker``) the webhook delivery worker."""
    from .pages import setup_pages
    from .webhooks import webhook_worker_ctx

    settings = app[SETTINGS]
    if BUYER_LIMITER not in app:
        app[BUYER_LIMITER] = SharedLimiter()
    app[PROFILE_CACHE] = {}
    for method, path, verb, operation, name in ROUTES:
        app.router.add_route(method, REST_PREFIX + path, _route_handler(verb, operation))
        metrics.OPERATIONS[(method, REST_PREFIX + path)] = name  # the metrics' and SLO view's operation
    if settings.simulation_secret is not None:
        app.router.add_post(SIMULATE_PATH, simulate_shipping)
    setup_pages(app)  # the buyer-facing pages that continue_url, links[] and permalink_url name
    staff.setup_admin(app)  # GET /admin/v1/orders[/{id}]
    slo.setup_admin(app)  # GET /admin/v1/slo?since=1h
    if settings.webhook_worker:
        app.cleanup_ctx.append(webhook_worker_ctx)
    if VERBS_KEY in app:  # verbs_setup runs before this in COMPONENTS
        from .verbs import provide

        provide(app[VERBS_KEY].registry)
        staff.provide(app[VERBS_KEY].registry)

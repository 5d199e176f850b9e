"""JSON Schemas of the UCP MCP tools' arguments and results (pure, built once per process).

The ``checkout`` argument of each checkout tool is the UCP request schema of its operation, as the
ucp-sdk models of the served version (2026-04-08) publish it (``checkout_create_request``,
``checkout_update_request``, ``checkout_complete_request``), with the extensions the gateway reads
(``fulfillment``, ``discounts``) added as properties, so an agent sees the field list and what is
required. ``$defs`` of the embedded schemas are hoisted to the root of the tool's ``inputSchema``
(their ``$ref`` s point at ``#/$defs/...``).

The ``outputSchema`` of a UCP tool is the part every answer shares: an object with a ``ucp``
envelope (a checkout, an order, or the UCP error envelope); the MCP SDK client validates each
``structuredContent`` against it.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from ucp_sdk.models.schemas.shopping.cart_create_request import CartCreateRequest
from ucp_sdk.models.schemas.shopping.cart_update_request import CartUpdateRequest
from ucp_sdk.models.schemas.shopping.catalog_lookup import GetProductRequest, LookupRequest
from ucp_sdk.models.schemas.shopping.catalog_search import SearchRequest
from ucp_sdk.models.schemas.shopping.checkout_complete_request import CheckoutCompleteRequest
from ucp_sdk.models.schemas.shopping.checkout_create_request import CheckoutCreateRequest
from ucp_sdk.models.schemas.shopping.checkout_update_request import CheckoutUpdateRequest
from ucp_sdk.models.schemas.shopping.discount import DiscountsObject
from ucp_sdk.models.schemas.shopping.types.fulfillment_create_request import FulfillmentCreateRequest

__all__ = ["UCP_RESULT_SCHEMA", "checkout_argument", "payload_argument"]

UCP_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A UCP response object: a checkout, an order, or the UCP error envelope (ucp.status error).",
    "properties": {
        "ucp": {
            "type": "object",
            "properties": {"version": {"type": "string"}, "status": {"type": "string"}},
            "required": ["version"],
        },
        "id": {"type": "string"},
        "status": {"type": "string"},
        "messages": {"type": "array", "items": {"type": "object"}},
        "continue_url": {"type": "string"},
    },
    "required": ["ucp"],
}

_MODELS: dict[str, type[BaseModel]] = {
    "create": CheckoutCreateRequest,
    "update": CheckoutUpdateRequest,
    "complete": CheckoutCompleteRequest,
}


def _split(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    return schema, schema.pop("$defs", {})


@functools.cache
def checkout_argument(operation: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(schema of arguments.checkout, $defs to hoist)`` for ``create`` / ``update`` / ``complete``.
    Raises KeyError for another operation. Callers must not mutate the result (shared)."""
    schema, defs = _split(_MODELS[operation])
    if operation != "complete":
        props = dict(schema.get("properties") or {})
        for name, model in (("fulfillment", FulfillmentCreateRequest), ("discounts", DiscountsObject)):
            sub, sub_defs = _split(model)
            defs = {**sub_defs, **defs}
            props[name] = sub
        schema["properties"] = props
    schema.pop("title", None)
    return schema, defs


# the payload argument (``catalog`` or ``cart``) of the catalog and cart tools: its UCP request model
_PAYLOADS: dict[str, type[BaseModel]] = {
    "search": SearchRequest,
    "lookup": LookupRequest,
    "product": GetProductRequest,
    "cart_create": CartCreateRequest,
    "cart_update": CartUpdateRequest,
}


@functools.cache
def payload_argument(operation: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(schema of arguments.catalog / arguments.cart, $defs to hoist)`` for ``search``, ``lookup``,
    ``product``, ``cart_create``, ``cart_update``. Callers must not mutate the result (shared)."""
    schema, defs = _split(_PAYLOADS[operation])
    if operation.startswith("cart"):
        props = dict(schema.get("properties") or {})
        props.pop("id", None)  # MCP: the cart object never carries the id (arguments.id does)
        sub, sub_defs = _split(DiscountsObject)
        props["discounts"], defs = sub, {**sub_defs, **defs}
        schema["properties"] = props
        schema["required"] = [r for r in schema.get("required", []) if r != "id"]
    schema.pop("title", None)
    return schema, defs

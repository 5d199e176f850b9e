"""Request validation with the ucp-sdk 0.5.0 models (UCP 2026-08-25) and reduction to writable state.

Bodies arrive in the neutral shape (``ucp_gateway.versions.from_wire`` ran first): what differs
between versions (buyer consent) is checked here in its neutral form, the rest by the models, whose
request shapes 2026-04-08 bodies also satisfy.

Response-only fields a client may send (``id``, ``status``, ``currency``, ``totals``, ``links``,
``ucp``, ``messages``, item ``title``/``price``, option lists, ...) are dropped, never trusted: the
server is the price authority. Payment credentials are never kept in the state.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from ucp_sdk.models.schemas.shopping.checkout_complete_request import CheckoutCompleteRequest
from ucp_sdk.models.schemas.shopping.checkout_create_request import CheckoutCreateRequest
from ucp_sdk.models.schemas.shopping.checkout_update_request import CheckoutUpdateRequest
from ucp_sdk.models.schemas.shopping.discount import DiscountsObject
from ucp_sdk.models.schemas.shopping.types.fulfillment_create_request import FulfillmentCreateRequest

from ..errors import BadRequest
from ..jsonbody import InvalidJson, loads_strict

__all__ = ["InvalidRequest", "parse_complete", "parse_json", "parse_state"]


class Consent(BaseModel):
    """Neutral buyer consent: the 2026-04-08 booleans (S:shopping/buyer_consent.json at 2026-04-08;
    the 2026-08-25 purpose map is projected onto them by ``versions.from_wire``). Other members are
    allowed and kept, as the 2026-04-08 model did."""

    model_config = ConfigDict(extra="allow")
    analytics: bool | None = None
    preferences: bool | None = None
    marketing: bool | None = None
    sale_of_data: bool | None = None


class InvalidRequest(BadRequest):
    """The body does not match the UCP request schema (HTTP 400, protocol error)."""

    code = "invalid_request"


def parse_json(raw: bytes | str) -> dict[str, Any]:
    """Decode a JSON object body (bytes, or text as loads_strict takes it). Raises InvalidRequest."""
    try:
        data = loads_strict(raw or b"{}")
    except InvalidJson as exc:
        raise InvalidRequest(str(exc)) from None
    if not isinstance(data, dict):
        raise InvalidRequest("body must be a JSON object")
    return data


def _validate(model: type[BaseModel], data: Any, where: str) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        path = f"{where}.{loc}" if loc else where
        raise InvalidRequest(f"{path}: {first['msg']}") from None


# Bounds the UCP schemas leave open: a checkout is priced, stored and echoed on every call, so an
# unbounded list is a cheap way to make each call expensive (10,000 line items took ~300 ms).
MAX_LINE_ITEMS = 100
MAX_QUANTITY = 10**9  # no stock reaches it (inventory counts are int4); beyond it pydantic's own errors were odd
MAX_DISCOUNT_CODES = 20
MAX_CODE_LENGTH = 64


def _check_bounds(data: dict[str, Any]) -> None:
    """What the models do not check: quantities are JSON integers (pydantic's lax mode would read
    ``true`` as 1 and ``"3"`` as 3; the schema says integer, which in JSON Schema 2020-12 §6.1.1 is
    any number with a zero fractional part, so ``2.0`` is 2 and the model reads it so), at most
    MAX_QUANTITY, and the list bounds above. Raises InvalidRequest naming the path."""
    items = data.get("line_items")
    if isinstance(items, list):
        if len(items) > MAX_LINE_ITEMS:
            raise InvalidRequest(f"$.line_items: at most {MAX_LINE_ITEMS} line items")
        for i, li in enumerate(items):
            q = li.get("quantity") if isinstance(li, dict) else None
            if q is None:
                continue
            if type(q) is not int and not (type(q) is float and q.is_integer()):
                raise InvalidRequest(f"$.line_items.{i}.quantity: Input should be a valid integer")
            if q > MAX_QUANTITY:
                raise InvalidRequest(f"$.line_items.{i}.quantity: at most {MAX_QUANTITY}")
            if q < 1:  # the model's own words, also for a float it cannot read as an int (-1e300)
                raise InvalidRequest(f"$.line_items.{i}.quantity: Input should be greater than or equal to 1")
    discounts = data.get("discounts")
    codes = discounts.get("codes") if isinstance(discounts, dict) else None
    if isinstance(codes, list):
        if len(codes) > MAX_DISCOUNT_CODES:
            raise InvalidRequest(f"$.discounts.codes: at most {MAX_DISCOUNT_CODES} codes")
        for i, code in enumerate(codes):
            if isinstance(code, str) and len(code) > MAX_CODE_LENGTH:
                raise InvalidRequest(f"$.discounts.codes.{i}: at most {MAX_CODE_LENGTH} characters")


def _dump(m: BaseModel | dict[str, Any] | None) -> dict[str, Any] | None:
    """A validated field as JSON data. Some ucp-sdk fields are plain mappings, not models
    (``attribution`` is ``dict[str, str]``), and are already JSON."""
    if m is None or isinstance(m, dict):
        return m
    return m.model_dump(mode="json", exclude_none=True)


def _clean_instrument(instr: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v for k, v in instr.items() if k in ("id", "handler_id", "type", "display", "billing_address", "selected")
    }


def _clean_fulfillment(f: dict[str, Any]) -> dict[str, Any]:
    methods = []
    for m in f.get("methods") or []:
        out = {k: m[k] for k in ("id", "type", "line_item_ids", "selected_destination_id") if m.get(k) is not None}
        if m.get("destinations") is not None:
            out["destinations"] = m["destinations"]
        if m.get("groups") is not None:
            out["groups"] = [{k: g[k] for k in ("id", "selected_option_id") if g.get(k)} for g in m["groups"]]
        methods.append(out)
    return {"methods": methods}


def parse_state(data: dict[str, Any], *, update: bool) -> dict[str, Any]:
    """Validate a create (``update=False``) or update body and return the writable state.

    Returns: ``{"line_items": [{"id"?, "item": {"id"}, "quantity"}], "buyer"?, "context"?,
    "attribution"?, "fulfillment"?, "discounts"?: {"codes"}, "payment"?: {"instruments"}}``.
    Raises: InvalidRequest (HTTP 400) naming the first offending field, e.g. a quantity below 1,
    above MAX_QUANTITY or not a JSON integer, more than MAX_LINE_ITEMS line items, or more than
    MAX_DISCOUNT_CODES codes or a code over MAX_CODE_LENGTH characters.
    """
    model = CheckoutUpdateRequest if update else CheckoutCreateRequest
    _check_bounds(data)
    req = _validate(model, data, "$")
    state: dict[str, Any] = {"line_items": []}
    seen: set[str] = set()
    for i, li in enumerate(req.line_items):  # type: ignore[attr-defined]
        entry: dict[str, Any] = {"item": {"id": li.item.id}, "quantity": li.quantity}
        lid = getattr(li, "id", None) or (li.model_extra or {}).get("id")
        if isinstance(lid, str) and lid:
            if lid in seen:  # fulfillment groups and allocations name line items by id
                raise InvalidRequest(f"$.line_items.{i}.id: {lid!r} names an earlier line item too")
            seen.add(lid)
            entry["id"] = lid
        state["line_items"].append(entry)
    if req.buyer is not None:  # type: ignore[attr-defined]
        buyer = _dump(req.buyer) or {}  # type: ignore[attr-defined]
        if "consent" in buyer:
            buyer["consent"] = _dump(_validate(Consent, buyer["consent"], "$.buyer.consent"))
        state["buyer"] = buyer
    for key in ("context", "attribution"):
        val = getattr(req, key)
        if val is not None:
            state[key] = _dump(val)
    if data.get("fulfillment") is not None:
        # lenient on update too: a method without line_item_ids (or a group without id) covers every
        # item, as on create; the update schema's stricter "required" rejects common platform payloads
        f = _validate(FulfillmentCreateRequest, data["fulfillment"], "$.fulfillment")
        state["fulfillment"] = _clean_fulfillment(_dump(f) or {})
    if data.get("discounts") is not None:
        d = _validate(DiscountsObject, data["discounts"], "$.discounts")
        state["discounts"] = {"codes": list(d.codes or [])}  # type: ignore[attr-defined]
    if req.payment is not None and req.payment.instruments:  # type: ignore[attr-defined]
        state["payment"] = {"instruments": [_clean_instrument(_dump(i) or {}) for i in req.payment.instruments]}  # type: ignore[attr-defined]
    return state


def parse_complete(data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Validate a complete body. Returns ``(selected_instrument_without_credential, token)``.

    The instrument chosen is the one marked ``selected`` or else the first. Raises InvalidRequest
    when ``payment.instruments`` is missing or empty.
    """
    req = _validate(CheckoutCompleteRequest, data, "$")
    instruments = req.payment.instruments or []  # type: ignore[attr-defined]
    if not instruments:
        raise InvalidRequest("$.payment.instruments: at least one payment instrument is required")
    chosen = next((i for i in instruments if i.selected), instruments[0])
    dumped = _dump(chosen) or {}
    cred = dumped.get("credential") or {}
    token = cred.get("token") if isinstance(cred, dict) else None
    return _clean_instrument(dumped), token if isinstance(token, str) else None

"""UCP 2026-08-25 wire shapes (the root), from and to the neutral (2026-04-08-shaped) bodies. Pure.

- Profile: ``keys[]`` is the JWK Set (EC and OKP keys); ``signing_keys`` mirrors the ES256 keys
  for 2026-04-08 verifiers of our webhooks (digest §2.2); ``map_order`` orders the payment handlers.
- Payment handlers: ``available_instruments[].constraints`` is a Constraint Expression over the
  instrument's constraint target (PG "Handler Declaration"): ``{"brands": [...]}`` becomes
  ``{"properties": {"brand": {"enum": [...]}}}``.
- Buyer consent (BC): the purpose map ``dev.ucp.consent.*`` -> ``{granted, source, description}``.
  The neutral state keeps the four 2026-04-08 booleans (analytics, preferences, marketing,
  sale_of_data = ``dev.ucp.consent.sale_or_sharing``): a boolean the platform sent is
  ``source: "platform"``; an absent one is the business default ``granted: false, source:
  "business"``. We advertise the four well-known purposes and no segments, so every decision a
  platform can confirm fits the booleans; unadvertised keys are ignored (BC "MUST ignore").
- Fulfillment (S:shopping/types/fulfillment_destination.json, fulfillment_option_base.json):
  destinations carry an explicit ``type`` (``shipping_address`` for shipping, ``business_location``
  for pickup; required in business responses, optional in platform requests, where we drop it:
  the method's type decides), and an option's ``description`` is a Description object
  (``{"plain": ...}``) instead of a string.
- Carts: ``buyer.consent`` by the checkout's rule, both ways; catalog answers are the neutral shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import BadRequest
from .shapes import register_shape
from .table import ROOT, ProtocolVersion
from .v2026_04_08 import publish_keys

__all__ = [
    "CONSENT_PURPOSES",
    "DESTINATION_TYPES",
    "cart",
    "cart_request",
    "checkout",
    "checkout_request",
    "consent_purposes",
    "fulfillment",
    "payment_handlers",
    "profile",
]

#: neutral boolean -> (2026-08-25 purpose id, the description we advertise)
CONSENT_PURPOSES: Mapping[str, tuple[str, str]] = {
    "analytics": ("dev.ucp.consent.analytics", "Measure how the shop is used to improve it."),
    "preferences": ("dev.ucp.consent.preferences", "Remember the buyer's settings and choices."),
    "marketing": ("dev.ucp.consent.marketing", "Send promotional offers and news."),
    "sale_of_data": ("dev.ucp.consent.sale_or_sharing", "Sell or share personal data with third parties."),
}
_BY_PURPOSE = {purpose: short for short, (purpose, _) in CONSENT_PURPOSES.items()}
_CONSENT_CAPABILITY = "dev.ucp.shopping.buyer_consent"


#: fulfillment method type -> the 2026-08-25 destination type of its destinations
DESTINATION_TYPES: Mapping[str, str] = {"shipping": "shipping_address", "pickup": "business_location"}


def _described(option: Any) -> Any:
    if isinstance(option, Mapping) and isinstance(option.get("description"), str):
        return dict(option, description={"plain": option["description"]})
    return option


def fulfillment(f: Mapping[str, Any]) -> dict[str, Any]:
    """A neutral checkout ``fulfillment`` as 2026-08-25: typed destinations, Description options."""
    methods = []
    for m in f.get("methods") or ():
        if not isinstance(m, Mapping):
            methods.append(m)
            continue
        m = dict(m)
        dtype = DESTINATION_TYPES.get(m.get("type"))  # type: ignore[arg-type]
        if dtype is not None and isinstance(m.get("destinations"), list):
            m["destinations"] = [
                {"type": dtype, **d} if isinstance(d, Mapping) and "type" not in d else d for d in m["destinations"]
            ]
        if isinstance(m.get("groups"), list):
            m["groups"] = [
                dict(g, options=[_described(o) for o in g["options"]])
                if isinstance(g, Mapping) and isinstance(g.get("options"), list)
                else g
                for g in m["groups"]
            ]
        methods.append(m)
    return {**f, "methods": methods}


def _fulfillment_request(f: Any) -> Any:
    """A 2026-08-25 request ``fulfillment`` in the neutral shape: destination ``type`` dropped."""
    if not isinstance(f, Mapping) or not isinstance(f.get("methods"), list):
        return f
    methods = []
    for m in f["methods"]:
        if isinstance(m, Mapping) and isinstance(m.get("destinations"), list):
            m = dict(
                m,
                destinations=[
                    {k: v for k, v in d.items() if k != "type"} if isinstance(d, Mapping) else d
                    for d in m["destinations"]
                ],
            )
        methods.append(m)
    return {**f, "methods": methods}


def _constraints(c: Any) -> Any:
    if isinstance(c, Mapping) and set(c) == {"brands"} and isinstance(c["brands"], list):
        return {"properties": {"brand": {"enum": list(c["brands"])}}}
    return c  # already an expression, or handler-defined: passed as given


def payment_handlers(handlers: Mapping[str, Any], pv: ProtocolVersion) -> dict[str, Any]:
    """A ``payment_handlers`` registry with 2026-08-25 instrument constraints."""
    out: dict[str, Any] = {}
    for name, entries in handlers.items():
        shaped = []
        for entry in entries:
            entry = dict(entry)
            if isinstance(entry.get("available_instruments"), list):
                entry["available_instruments"] = [
                    dict(i, constraints=_constraints(i["constraints"]))
                    if isinstance(i, Mapping) and "constraints" in i
                    else i
                    for i in entry["available_instruments"]
                ]
            shaped.append(entry)
        out[name] = shaped
    return out


def profile(doc: Mapping[str, Any], pv: ProtocolVersion) -> dict[str, Any]:
    """A neutral profile as the 2026-08-25 root (``supported_versions`` as the builder gave it)."""
    ucp = dict(doc["ucp"])
    handlers = ucp.get("payment_handlers") or {}
    ucp["payment_handlers"] = payment_handlers(handlers, pv)
    if handlers:
        ucp["map_order"] = {"payment_handlers": list(handlers)}
    out: dict[str, Any] = {"ucp": ucp}
    if "keys" in doc:
        out.update(publish_keys(doc["keys"], pv))
    return out


def consent_purposes(consent: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Neutral consent booleans -> the full advertised 2026-08-25 purpose map."""
    consent = consent or {}
    out: dict[str, dict[str, Any]] = {}
    for short, (purpose, description) in CONSENT_PURPOSES.items():
        given = consent.get(short)
        if isinstance(given, bool):
            out[purpose] = {"granted": given, "source": "platform", "description": description}
        else:
            out[purpose] = {"granted": False, "source": "business", "description": description}
    return out


def _buyer_consent(body: Mapping[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    """``out`` (a copy of ``body``) with ``buyer.consent`` as 2026-08-25: the advertised purpose map
    when the consent extension is in the body's envelope (BC: the business MUST advertise the full
    set), else no consent at all (not negotiated: not this caller's field)."""
    caps = (body.get("ucp") or {}).get("capabilities") or {}
    buyer = body.get("buyer")
    if _CONSENT_CAPABILITY not in caps:
        if isinstance(buyer, Mapping) and "consent" in buyer:
            out["buyer"] = {k: v for k, v in buyer.items() if k != "consent"}
            if not out["buyer"]:
                del out["buyer"]
        return out
    out["buyer"] = dict(buyer or {}, consent=consent_purposes((buyer or {}).get("consent")))
    return out


def checkout(body: Mapping[str, Any], pv: ProtocolVersion) -> dict[str, Any]:
    """A neutral checkout body as 2026-08-25: typed fulfillment, ``buyer.consent`` purposes."""
    out = dict(body)
    if isinstance(body.get("fulfillment"), Mapping):
        out["fulfillment"] = fulfillment(body["fulfillment"])
    return _buyer_consent(body, out)


def cart(body: Mapping[str, Any], pv: ProtocolVersion) -> dict[str, Any]:
    """A neutral cart body (S:shopping/cart.json) as 2026-08-25: ``buyer.consent`` by the checkout's
    rule. The rest of a cart (line items, signed estimated totals, ``continue_url``, ``expires_at``)
    has one shape at both versions, and so has every catalog answer (search, lookup, get_product:
    nothing is registered for ``catalog``, the identity)."""
    return _buyer_consent(body, dict(body))


def _consent_booleans(consent: Any, path: str) -> dict[str, bool]:
    if not isinstance(consent, Mapping):
        raise BadRequest(f"{path}: must be an object of consent purposes")
    out: dict[str, bool] = {}
    for purpose, decision in consent.items():
        short = _BY_PURPOSE.get(purpose)
        if short is None:
            continue  # unadvertised purpose: ignored (BC)
        where = f"{path}.{purpose}"
        if not isinstance(decision, Mapping):
            raise BadRequest(f"{where}: must be an object")
        granted, source = decision.get("granted"), decision.get("source")
        if not isinstance(granted, bool):
            raise BadRequest(f"{where}.granted: Input should be a valid boolean")
        if source not in ("business", "platform"):
            raise BadRequest(f"{where}.source: Input should be 'business' or 'platform'")
        if source == "platform":  # a buyer-stated decision; "business" echoes our default
            out[short] = granted
    return out


def _consent_request(data: Mapping[str, Any], out: dict[str, Any]) -> None:
    buyer = data.get("buyer")
    if isinstance(buyer, Mapping) and "consent" in buyer:
        out["buyer"] = dict(buyer, consent=_consent_booleans(buyer["consent"], "$.buyer.consent"))


def checkout_request(data: Mapping[str, Any], pv: ProtocolVersion) -> dict[str, Any]:
    """A 2026-08-25 checkout create/update body in the neutral shape (consent purposes -> booleans,
    destination types dropped). Raises: BadRequest (400 ``invalid_request``) naming the path of a
    malformed consent decision."""
    buyer = data.get("buyer")
    has_consent = isinstance(buyer, Mapping) and "consent" in buyer
    if not has_consent and "fulfillment" not in data:
        return data  # type: ignore[return-value]
    out = dict(data)
    _consent_request(data, out)
    if "fulfillment" in data:
        out["fulfillment"] = _fulfillment_request(data["fulfillment"])
    return out


def cart_request(data: Mapping[str, Any], pv: ProtocolVersion) -> dict[str, Any]:
    """A 2026-08-25 cart create/update body in the neutral shape: ``buyer.consent`` purposes ->
    booleans (so a checkout made from the cart keeps the platform's decisions). Raises BadRequest
    (400) naming the path of a malformed decision; a body that is not an object passes as it is
    (the cart's own validation refuses it)."""
    if not isinstance(data, Mapping):
        return data  # type: ignore[return-value]
    buyer = data.get("buyer")
    if not (isinstance(buyer, Mapping) and "consent" in buyer):
        return data  # type: ignore[return-value]
    out = dict(data)
    _consent_request(data, out)
    return out


register_shape("profile", ROOT, response=profile)
register_shape("payment_handlers", ROOT, response=payment_handlers)
register_shape("checkout", ROOT, response=checkout)
register_shape("checkout.request", ROOT, request=checkout_request)
register_shape("cart", ROOT, response=cart)
register_shape("cart.request", ROOT, request=cart_request)

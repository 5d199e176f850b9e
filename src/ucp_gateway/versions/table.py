"""The protocol versions the gateway serves, as data (UCP overview "Versioning", "Protocol Version").

One row per served version (:data:`VERSIONS`), the root first. A row says what differs on the wire:
where the profile lives and which key lists it carries, whether capability entries need ``spec``,
the consent and payment-handler constraint models, ``map_order``, and per resource kind the response
fields whose shape differs from the other versions (:attr:`ProtocolVersion.wire_fields`, what the
projection property test holds the projections to). Capability names per version are the second
table, :data:`CAPABILITIES` (logical name -> version -> wire name, spec page, schema path, parents).

Pure data and lookups; no I/O, no imports from other subsystems (foundation layer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "ADVERTISED",
    "CAPABILITIES",
    "KNOWN_UNSERVED",
    "ROOT",
    "SERVED",
    "VERSIONS",
    "CapabilityWire",
    "ProtocolVersion",
    "capability_entries",
    "logical_name",
    "protocol",
    "select_version",
    "wire_name",
]

ROOT = "2026-08-25"
LEAF_2026_04_08 = "2026-04-08"

# Elliptic-curve and OKP keys as JWK (kty, crv) pairs; used to say which keys each list publishes.
_P256 = ("EC", "P-256")
_P384 = ("EC", "P-384")
_ED25519 = ("OKP", "Ed25519")


@dataclass(frozen=True, slots=True)
class ProtocolVersion:
    """What one served protocol version looks like on the wire.

    Attributes:
        version: the release date string (``YYYY-MM-DD``; never ``draft``: OV "Pre-release Versions").
        profile_path: where its business/platform profile is served on the company origin.
        key_lists: profile member -> the (kty, crv) pairs of our keys it lists, in member order
            (2026-08-25: ``keys[]`` is the JWK Set and ``signing_keys`` our ES256 mirror for 04-08
            verifiers of our webhooks; 2026-04-08: EC keys only).
        spec_required: capability entries must carry ``spec`` (04-08; optional at 08-25, where we
            give it anyway: a profile that is also read as a platform profile needs it).
        consent: ``booleans`` (04-08: analytics/preferences/marketing/sale_of_data) or
            ``purposes`` (08-25: ``dev.ucp.consent.*`` -> {granted, source, description}).
        handler_constraints: ``brands`` (04-08 handler-defined ``{"brands": [...]}``) or
            ``expression`` (08-25 Constraint Expression over the instrument's constraint target).
        map_order: ``ucp.map_order`` is defined (08-25 only; omitted from 04-08 documents).
        wire_fields: resource kind -> dotted response paths whose shape differs between versions
            (the rest of a projected body is the same bytes in every version).
    """

    version: str
    profile_path: str
    key_lists: Mapping[str, frozenset[tuple[str, str]]]
    spec_required: bool
    consent: str
    handler_constraints: str
    map_order: bool
    wire_fields: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @property
    def is_root(self) -> bool:
        return self.version == ROOT

    @property
    def ucp_dev(self) -> str:
        """Base URL of the release's published spec and schemas (``https://ucp.dev/{version}``)."""
        return f"https://ucp.dev/{self.version}"

    def spec_url(self, page: str) -> str:
        return f"{self.ucp_dev}/specification/{page}"

    def schema_url(self, path: str) -> str:
        return f"{self.ucp_dev}/schemas/{path}"

    def service_schema_url(self, transport: str) -> str:
        name = {"rest": "rest.openapi.json", "mcp": "mcp.openrpc.json"}[transport]
        return f"{self.ucp_dev}/services/shopping/{name}"


_COMMON_FIELDS = {
    "checkout": frozenset({"ucp", "buyer.consent", "fulfillment"}),
    "order": frozenset({"ucp"}),
    "error": frozenset({"ucp"}),
    "cart": frozenset({"ucp", "buyer.consent"}),
    "catalog": frozenset({"ucp"}),
}

VERSIONS: Mapping[str, ProtocolVersion] = MappingProxyType(
    {
        ROOT: ProtocolVersion(
            version=ROOT,
            profile_path="/.well-known/ucp",
            key_lists=MappingProxyType(
                {"keys": frozenset({_P256, _P384, _ED25519}), "signing_keys": frozenset({_P256})}
            ),
            spec_required=False,
            consent="purposes",
            handler_constraints="expression",
            map_order=True,
            wire_fields=MappingProxyType(_COMMON_FIELDS),
        ),
        LEAF_2026_04_08: ProtocolVersion(
            version=LEAF_2026_04_08,
            profile_path=f"/.well-known/ucp/{LEAF_2026_04_08}",
            key_lists=MappingProxyType({"signing_keys": frozenset({_P256, _P384}), "keys": frozenset({_P256, _P384})}),
            spec_required=True,
            consent="booleans",
            handler_constraints="brands",
            map_order=False,
            wire_fields=MappingProxyType(_COMMON_FIELDS),
        ),
    }
)

#: Served versions, root first (the order of ``supported_versions`` and of error messages).
SERVED: tuple[str, ...] = tuple(VERSIONS)

#: Versions we know and deliberately do not serve, with why (docs/versions.md): 2026-01-23 signs
#: webhooks as detached JWTs in ``Request-Signature``, has positive discount totals, three
#: severities and another error envelope; serving it would be a second protocol, not a projection.
KNOWN_UNSERVED: Mapping[str, str] = MappingProxyType(
    {
        "2026-01-23": "detached-JWT Request-Signature webhooks, positive discounts, other error envelope",
        "2026-01-11": "object-shaped services, array capabilities, payment.handlers",
    }
)


def protocol(version: str) -> ProtocolVersion:
    """The row of a served version. Raises KeyError for any other string."""
    return VERSIONS[version]


def select_version(platform_version: str, *, served: tuple[str, ...] = SERVED) -> ProtocolVersion | None:
    """Request-time version choice (OV "Request-Time Validation"): exact match with the root or a
    ``supported_versions`` key (every served version), never by date order. None: unsupported."""
    if platform_version in served:
        return VERSIONS.get(platform_version)
    return None


@dataclass(frozen=True, slots=True)
class CapabilityWire:
    """One capability at one version: wire ``name``, ``spec`` page (None: no page), ``schema`` path
    under the release's ``schemas/``, and ``extends`` as logical names (empty for a root)."""

    name: str
    spec: str | None
    schema: str
    extends: tuple[str, ...] = ()


def _same(name: str, spec: str, schema: str, extends: tuple[str, ...] = ()) -> dict[str, CapabilityWire]:
    wire = CapabilityWire(name, spec, schema, extends)
    return {ROOT: wire, LEAF_2026_04_08: wire}


# logical name -> version -> wire. A capability absent at a version is not offered there.
CAPABILITIES: Mapping[str, Mapping[str, CapabilityWire]] = MappingProxyType(
    {
        "checkout": _same("dev.ucp.shopping.checkout", "checkout", "shopping/checkout.json"),
        "fulfillment": _same("dev.ucp.shopping.fulfillment", "fulfillment", "shopping/fulfillment.json", ("checkout",)),
        "discount": _same("dev.ucp.shopping.discount", "discount", "shopping/discount.json", ("checkout",)),
        "buyer_consent": _same(
            "dev.ucp.shopping.buyer_consent", "buyer-consent", "shopping/buyer_consent.json", ("checkout",)
        ),
        "order": _same("dev.ucp.shopping.order", "order", "shopping/order.json"),
        "cart": _same("dev.ucp.shopping.cart", "cart", "shopping/cart.json"),
        "catalog.search": _same("dev.ucp.shopping.catalog.search", "catalog/search", "shopping/catalog_search.json"),
        "catalog.lookup": _same("dev.ucp.shopping.catalog.lookup", "catalog/lookup", "shopping/catalog_lookup.json"),
        "ap2_mandate": {
            ROOT: CapabilityWire(
                "dev.ucp.common.payment.ap2_mandate",
                "payment/extensions/ap2-mandates",
                "common/payment_ap2_mandate.json",
                ("checkout",),
            ),
            LEAF_2026_04_08: CapabilityWire(
                "dev.ucp.shopping.ap2_mandate", "ap2-mandates", "shopping/ap2_mandate.json", ("checkout",)
            ),
        },
    }
)

#: What the gateway implements and advertises, in profile order (add a logical name here when its
#: operations exist; its wire shapes register with :func:`ucp_gateway.versions.register_shape`).
ADVERTISED: tuple[str, ...] = (
    "checkout", "fulfillment", "discount", "buyer_consent", "order", "catalog.search", "catalog.lookup", "cart"
)  # fmt: skip


def wire_name(logical: str, version: str) -> str | None:
    """The wire name of a logical capability at ``version`` (None: not defined there)."""
    wire = CAPABILITIES.get(logical, {}).get(version)
    return wire.name if wire else None


def logical_name(name: str, version: str) -> str | None:
    """The logical name of a wire capability ``name`` at ``version`` (None: not ours)."""
    for logical, per in CAPABILITIES.items():
        wire = per.get(version)
        if wire is not None and wire.name == name:
            return logical
    return None


def capability_entries(version: str, logical: tuple[str, ...] = ADVERTISED) -> dict[str, list[dict[str, str]]]:
    """The ``dev.ucp.*`` business registry entries of ``logical`` at ``version``: ``{name: [{version,
    spec?, schema, extends?}]}`` (OV "Capability Versions": every ``dev.ucp.*`` entry declares the
    release version; S:capability.json ``business_schema`` requires ``schema``)."""
    pv = VERSIONS[version]
    out: dict[str, list[dict[str, str]]] = {}
    for name in logical:
        wire = CAPABILITIES[name].get(version)
        if wire is None:
            continue
        entry: dict[str, str] = {"version": version}
        if wire.spec is not None:  # required at 04-08, optional at 08-25 (a platform schema needs it)
            entry["spec"] = pv.spec_url(wire.spec)
        entry["schema"] = pv.schema_url(wire.schema)
        parents = [CAPABILITIES[p][version].name for p in wire.extends if version in CAPABILITIES.get(p, {})]
        if parents:
            entry["extends"] = parents[0] if len(parents) == 1 else parents  # type: ignore[assignment]
        out[wire.name] = [entry]
    return out

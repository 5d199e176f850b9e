"""Building the profiles we serve at ``/.well-known/ucp`` (and each older version's leaf). Pure.

- Company (business) profile: UCP overview "Profile Structure" and ``business_schema``, one document
  per served version (``ucp_gateway.versions``): the 2026-08-25 root names the leaves in
  ``supported_versions``; the builder writes the neutral document and ``versions.to_wire("profile")``
  gives it the version's shape (key lists, handler constraints, ``map_order``).
- Platform node: also a valid business-shaped profile, carrying the vendor capability
  ``{vendor}.agent_graph`` whose config lists the companies with cursor pagination (the INDEX wave
  of progressive disclosure; sub-agent detail lives in the company profiles, verbs in the manifest).

Vendor capability names and document URLs follow UCP namespace authority binding: the
``{vendor_prefix}`` namespace is bound to the host of ``{vendor_base_url}`` (reversed labels).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from ..errors import BadRequest
from ..versions import ROOT, SERVED, VERSIONS, capability_entries, to_wire

__all__ = [
    "MCP_PATH",
    "REST_PATH",
    "UCP_VERSION",
    "VENDOR_VERSION",
    "SubagentSummary",
    "VendorNamespace",
    "authority_binding_ok",
    "build_company_profile",
    "build_platform_profile",
    "decode_cursor",
    "default_manifest_url",
    "default_payment_handlers",
    "encode_cursor",
    "shopping_capabilities",
    "supported_versions",
]

UCP_VERSION = ROOT  # the root version: what /.well-known/ucp serves
VENDOR_VERSION = "2026-04-08"  # our vendor capabilities version independently (OV "Capability Versions")
REST_PATH = "/ucp/v1"  # REST binding endpoint on the company's origin (OpenAPI paths appended)
MCP_PATH = "/ucp/mcp"  # MCP Streamable HTTP endpoint


@dataclass(frozen=True, slots=True)
class VendorNamespace:
    """The vendor capability namespace and where its spec/schema documents live.

    Attributes:
        prefix: reverse-domain prefix, e.g. ``com.solidnumber``.
        base_url: base of the documents, e.g. ``https://solidnumber.com/ucp`` (no trailing slash).
        version: version of the vendor capabilities (``YYYY-MM-DD``).
    """

    prefix: str
    base_url: str
    version: str = VENDOR_VERSION

    def name(self, short: str) -> str:
        return f"{self.prefix}.{short}"

    def spec_url(self, short: str) -> str:
        return f"{self.base_url.rstrip('/')}/specification/{short}"

    def schema_url(self, short: str) -> str:
        return f"{self.base_url.rstrip('/')}/schemas/{short}.json"

    def entry(self, short: str, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "spec": self.spec_url(short),
            "schema": self.schema_url(short),
        }
        if config is not None:
            out["config"] = dict(config)
        return out


@dataclass(frozen=True, slots=True)
class SubagentSummary:
    """What a company profile says about one sub-agent (from the verb registry).

    Attributes:
        verb_count: verbs the sub-agent exposes on the UCP surface.
        risk_classes: risk classes present among them (e.g. ``READ``, ``WRITE``).
        role_floors: role floors present among them (e.g. ``read_only``, ``admin``).
        manifest_url: where to get the verb list; None -> the default manifest URL on the origin.
    """

    verb_count: int = 0
    risk_classes: tuple[str, ...] = ()
    role_floors: tuple[str, ...] = ()
    manifest_url: str | None = None


def authority_binding_ok(prefix: str, base_url: str) -> bool:
    """UCP namespace authority binding: the reversed host labels of ``base_url`` are equal to, or a
    label-aligned prefix of, ``prefix`` (``solidnumber.com`` binds ``com.solidnumber``; HEAD #530)."""
    host = (urlsplit(base_url).hostname or "").lower()
    if urlsplit(base_url).scheme != "https" or not host:
        return False
    reversed_host = ".".join(reversed(host.split(".")))
    return prefix == reversed_host or prefix.startswith(reversed_host + ".")


def shopping_capabilities(version: str = UCP_VERSION) -> dict[str, list[dict[str, Any]]]:
    """The ``dev.ucp.*`` capability registry entries the gateway implements, at ``version``."""
    return capability_entries(version)  # type: ignore[return-value]


def default_payment_handlers(vendor: VendorNamespace) -> dict[str, list[dict[str, Any]]]:
    """The demo payment handler (tokens ``success_token`` / ``fail_token``; demo data README)."""
    entry = vendor.entry("mock_payment", {"environment": "demo"})
    entry["id"] = "mock_payment_handler"
    entry["available_instruments"] = [{"type": "card", "constraints": {"brands": ["visa", "mastercard"]}}]
    return {vendor.name("mock_payment"): [entry]}


def _services(origin: str, version: str) -> dict[str, list[dict[str, Any]]]:
    """One REST and one MCP endpoint, shared by every version: the version of a call comes from the
    caller's profile (OV "Request-Time Validation"), so one path serves them all."""
    pv = VERSIONS[version]
    out = []
    for transport, path in (("rest", REST_PATH), ("mcp", MCP_PATH)):
        entry: dict[str, Any] = {"version": version, "spec": pv.spec_url("overview")}
        entry.update(transport=transport, endpoint=origin + path, schema=pv.service_schema_url(transport))
        out.append(entry)
    return {"dev.ucp.shopping": out}


def supported_versions(origin: str, version: str) -> dict[str, str] | None:
    """``ucp.supported_versions`` of the ``version`` document on ``origin``: every other served
    version -> its leaf URL on the root; None on a leaf (it MUST NOT carry the member)."""
    if version != ROOT:
        return None
    return {v: origin + VERSIONS[v].profile_path for v in SERVED if v != ROOT}


def _versioned(ucp: dict[str, Any], origin: str, version: str) -> dict[str, Any]:
    leaves = supported_versions(origin, version)
    if leaves:
        return {"version": version, "supported_versions": leaves, **{k: v for k, v in ucp.items() if k != "version"}}
    return ucp


def default_manifest_url(origin: str, subagent: str) -> str:
    """The verb manifest of one sub-agent (solid-verbs manifest endpoint, filtered to the UCP surface)."""
    return f"{origin}/api/v1/agent/verbs?surface=ucp&subagent={quote(subagent)}"


def build_company_profile(
    *,
    origin: str,
    vendor: VendorNamespace,
    subagents: Mapping[str, SubagentSummary],
    keys: Sequence[Mapping[str, Any]],
    payment_handlers: Mapping[str, Sequence[Mapping[str, Any]]],
    version: str = UCP_VERSION,
) -> dict[str, Any]:
    """A company's business profile at ``version`` (a served version; the root by default).

    Args:
        origin: ``scheme://host[:port]`` of the company (no trailing slash).
        vendor: the vendor namespace.
        subagents: enabled sub-agent name -> summary; one ``{vendor}.{name}`` capability each.
        keys: the company's published public JWKs (pending + active + rotating).
        payment_handlers: the ``ucp.payment_handlers`` registry.
    Returns: the JSON document (key lists per the version's ``key_lists``).
    """
    capabilities = shopping_capabilities(version)
    for name in sorted(subagents):
        s = subagents[name]
        config = {
            "verb_count": s.verb_count,
            "risk_classes": sorted(s.risk_classes),
            "role_floors": sorted(s.role_floors),
            "manifest": s.manifest_url or default_manifest_url(origin, name),
        }
        capabilities[vendor.name(name)] = [vendor.entry(name, config)]
    ucp = {
        "version": version,
        "services": _services(origin, version),
        "capabilities": capabilities,
        "payment_handlers": {k: [dict(e) for e in v] for k, v in payment_handlers.items()},
    }
    return to_wire("profile", {"ucp": _versioned(ucp, origin, version), "keys": list(keys)}, version)


_CURSOR_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")  # tenancy's slug rule


def encode_cursor(slug: str) -> str:
    """Opaque keyset cursor for the page after ``slug``."""
    return base64.urlsafe_b64encode(slug.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """Inverse of :func:`encode_cursor`. Raises BadRequest (``invalid_cursor``)."""
    try:
        slug = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadRequest("invalid cursor", code="invalid_cursor") from None
    if not _CURSOR_SLUG.fullmatch(slug):  # only a company slug can be a cursor (never sent to SQL otherwise)
        raise BadRequest("invalid cursor", code="invalid_cursor")
    return slug


def build_platform_profile(
    *,
    vendor: VendorNamespace,
    first_page: Mapping[str, Any],
    keys: Sequence[Mapping[str, Any]] = (),
    version: str = UCP_VERSION,
    origin: str | None = None,
) -> dict[str, Any]:
    """The platform node's profile at ``version``: no shopping services, one ``{vendor}.agent_graph``
    capability whose config is the first agent-graph page (``next`` links to the rest). With
    ``origin``, the root names the platform node's leaves in ``supported_versions``."""
    ucp = {
        "version": version,
        "services": {},
        "capabilities": {vendor.name("agent_graph"): [vendor.entry("agent_graph", first_page)]},
        "payment_handlers": {},
    }
    doc: dict[str, Any] = {"ucp": _versioned(ucp, origin, version) if origin is not None else ucp}
    if keys:
        doc["keys"] = list(keys)
    return to_wire("profile", doc, version)

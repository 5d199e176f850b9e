"""Capability negotiation (UCP 2026-04-08 overview, "Negotiation Protocol"). Pure functions, no I/O.

Registries are mappings ``name -> [entry, ...]`` where an entry is a JSON object with at least
``version`` (``YYYY-MM-DD``) and optionally ``extends`` (a string or a non-empty array of names).
A negotiated set is ``name -> entry`` (one entry per capability, the business's entry for the
highest common version).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import CapabilitiesIncompatible, ProfileNotTrusted, VersionUnsupported

__all__ = [
    "OPERATION_ROOTS",
    "Negotiated",
    "check_trust",
    "check_version",
    "intersect_capabilities",
    "negotiate",
    "parents_of",
    "prune_extensions",
    "require_capability",
    "select_for_operation",
]

Entry = Mapping[str, Any]
Registry = Mapping[str, Sequence[Entry]]

# Roots relevant to each operation family (overview, "Response Capability Selection").
OPERATION_ROOTS: dict[str, tuple[str, ...]] = {
    "checkout": ("dev.ucp.shopping.checkout",),
    "cart": ("dev.ucp.shopping.cart",),
    "order": ("dev.ucp.shopping.order",),
    "catalog": ("dev.ucp.shopping.catalog",),
}


@dataclass(frozen=True, slots=True)
class Negotiated:
    """Outcome of a successful negotiation.

    Attributes:
        version: the protocol version used to process the request (``YYYY-MM-DD``).
        capabilities: name -> the business entry chosen (highest common version), after pruning.
    """

    version: str
    capabilities: Mapping[str, Entry]

    def response_registry(self, operation: str | None = None) -> dict[str, list[dict[str, str]]]:
        """``ucp.capabilities`` for a response: ``{name: [{"version": v}]}``, only what is relevant."""
        caps = self.capabilities if operation is None else select_for_operation(self.capabilities, operation)
        return {name: [{"version": str(caps[name]["version"])}] for name in sorted(caps)}


def parents_of(entry: Entry) -> tuple[str, ...]:
    """The parents named by ``extends``: () for a root, one for a string, several for an array."""
    ext = entry.get("extends")
    if ext is None:
        return ()
    if isinstance(ext, str):
        return (ext,)
    return tuple(p for p in ext if isinstance(p, str))


def check_version(platform_version: str, business_version: str, supported_versions: Mapping[str, str] | None) -> str:
    """Request-time protocol version check (overview, "Request-Time Validation").

    Returns: the version to process with: ``business_version`` when equal, or the platform's version
    when it is a key of ``supported_versions``.
    Raises: VersionUnsupported otherwise.
    """
    if platform_version == business_version:
        return business_version
    if supported_versions and platform_version in supported_versions:
        return platform_version
    served = [business_version, *(supported_versions or {})]
    raise VersionUnsupported(
        f"protocol version {platform_version!r} is not supported; served: {', '.join(served)}",
        details={"supported_versions": served},
    )


def _canonical(entry: Entry) -> str:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str)


def _versions(entries: Iterable[Entry]) -> set[str]:
    return {str(e["version"]) for e in entries if isinstance(e, Mapping) and "version" in e}


def intersect_capabilities(business: Registry, platform: Registry) -> dict[str, Entry]:
    """Capability intersection with transitive extension pruning (overview, "Intersection Algorithm").

    For each capability both sides list, keep the business entry of the highest version both
    support; drop capabilities with no common version; then :func:`prune_extensions`.
    The result does not depend on the order of either input (ties broken by canonical JSON).
    """
    active: dict[str, Entry] = {}
    for name, b_entries in business.items():
        p_entries = platform.get(name)
        if not p_entries:
            continue
        common = _versions(b_entries) & _versions(p_entries)
        if not common:
            continue
        best = max(common)  # YYYY-MM-DD sorts lexically by date
        candidates = [e for e in b_entries if isinstance(e, Mapping) and str(e.get("version")) == best]
        active[name] = min(candidates, key=_canonical)
    return prune_extensions(active)


def prune_extensions(capabilities: Mapping[str, Entry]) -> dict[str, Entry]:
    """Drop, until stable, every extension none of whose parents is present.

    A string ``extends`` needs its parent; an array needs at least one of its parents (multi-parent
    extensions, UCP 2026-04-08 capability.json). Computed from the roots outwards, so an extension is
    kept only when a chain of present parents leads to a root: cycles of extensions with no root are
    dropped too (the overview's loop would keep them). Idempotent; a subset of the input.
    """
    kept = {n for n, e in capabilities.items() if not parents_of(e)}
    changed = True
    while changed:
        changed = False
        for name, entry in capabilities.items():
            if name not in kept and any(p in kept for p in parents_of(entry)):
                kept.add(name)
                changed = True
    return {n: capabilities[n] for n in sorted(kept)}


def select_for_operation(capabilities: Mapping[str, Entry], operation: str) -> dict[str, Entry]:
    """The negotiated capabilities relevant to one operation (overview, "Response Capability Selection").

    A root is relevant when it is the operation's root; an extension when any of its parents is a
    relevant root (transitively, so an extension of a relevant extension is kept too).
    """
    relevant = {r for r in OPERATION_ROOTS.get(operation, (operation,)) if r in capabilities}
    changed = True
    while changed:
        changed = False
        for name, entry in capabilities.items():
            if name not in relevant and any(p in relevant for p in parents_of(entry)):
                relevant.add(name)
                changed = True
    return {n: capabilities[n] for n in sorted(relevant)}


def check_trust(profile_url: str, *, allowlist_mode: bool, known: Iterable[str]) -> None:
    """Pre-approved platform registry (signatures.md): raise ProfileNotTrusted in allowlist mode
    when ``profile_url`` is not registered. Open mode accepts every profile."""
    if allowlist_mode and profile_url not in set(known):
        raise ProfileNotTrusted("this platform profile is not registered with the company")


def negotiate(
    *,
    platform_version: str,
    platform_capabilities: Registry,
    business_version: str,
    business_capabilities: Registry,
    supported_versions: Mapping[str, str] | None = None,
    operation: str | None = None,
    continue_url: str | None = None,
) -> Negotiated:
    """Version check, then intersection and pruning (overview, "Business Requirements" 1-6).

    Args:
        platform_version: ``ucp.version`` of the fetched platform profile.
        platform_capabilities / business_capabilities: the two registries.
        operation: when given (``checkout``, ``order``, ...), the operation's root must survive.
        continue_url: put on the ``capabilities_incompatible`` envelope.
    Returns: :class:`Negotiated`.
    Raises: VersionUnsupported (422); CapabilitiesIncompatible (200 envelope) when the intersection is
        empty or lacks the operation's root.
    """
    version = check_version(platform_version, business_version, supported_versions)
    active = intersect_capabilities(business_capabilities, platform_capabilities)
    if not active:
        raise CapabilitiesIncompatible(version=version, continue_url=continue_url)
    if operation is not None:
        require_capability(
            Negotiated(version, active),
            OPERATION_ROOTS.get(operation, (operation,))[0],
            continue_url=continue_url,
        )
    return Negotiated(version, active)


def require_capability(negotiated: Negotiated, name: str, *, continue_url: str | None = None) -> None:
    """Refuse a call to a capability outside the negotiated set. Raises CapabilitiesIncompatible."""
    if name not in negotiated.capabilities:
        raise CapabilitiesIncompatible(
            f"capability {name} was not negotiated with this platform",
            version=negotiated.version,
            continue_url=continue_url,
        )

"""UCP 2026-04-08 wire shapes (the leaf). The neutral shapes are this version's, so responses pass
through; only the profile document is shaped here (D04 §1: ``signing_keys`` with EC keys, no
``supported_versions``, no ``map_order``; a leaf MUST NOT list other versions, OV "Initial
Service and Capability Discovery"). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shapes import register_shape
from .table import LEAF_2026_04_08, ProtocolVersion

__all__ = ["profile"]


def publish_keys(keys: Any, pv: ProtocolVersion) -> dict[str, list[dict[str, Any]]]:
    """The profile's key lists for ``pv`` (:attr:`ProtocolVersion.key_lists`): each member lists the
    keys whose (kty, crv) it allows, in the order given. Shared by every version."""
    keys = [k for k in keys or () if isinstance(k, Mapping)]
    return {
        member: [dict(k) for k in keys if (k.get("kty"), k.get("crv")) in allowed]
        for member, allowed in pv.key_lists.items()
    }


def profile(doc: Mapping[str, Any], pv: ProtocolVersion) -> dict[str, Any]:
    """A neutral profile ``{"ucp": {...}, "keys"?: [every published JWK]}`` as a 2026-04-08 leaf."""
    ucp = {k: v for k, v in doc["ucp"].items() if k not in ("supported_versions", "map_order")}
    out: dict[str, Any] = {"ucp": ucp}
    if "keys" in doc:
        out.update(publish_keys(doc["keys"], pv))
    return out


register_shape("profile", LEAF_2026_04_08, response=profile)

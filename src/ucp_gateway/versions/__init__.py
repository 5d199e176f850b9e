"""The UCP protocol versions the gateway serves and the wire shape of each (docs/versions.md).

- :mod:`.table`: the versions as data (:data:`VERSIONS`, root :data:`ROOT`), capability names per
  version (:data:`CAPABILITIES`), what is advertised (:data:`ADVERTISED`), :func:`select_version`.
- :mod:`.shapes`: :func:`register_shape` (how a capability registers its per-version wire shapes),
  :func:`to_wire` / :func:`from_wire` (the one place they are applied).
- :mod:`.v2026_08_25`, :mod:`.v2026_04_08`: the projections of each version (pure), registered on
  import of this package.

Foundation layer: imports nothing but ``ucp_gateway.errors``; every subsystem may import it.
"""

from __future__ import annotations

from . import v2026_04_08, v2026_08_25  # noqa: F401 - registers the built-in shapes
from .shapes import from_wire, register_shape, registered, to_wire
from .table import (
    ADVERTISED,
    CAPABILITIES,
    KNOWN_UNSERVED,
    LEAF_2026_04_08,
    ROOT,
    SERVED,
    VERSIONS,
    CapabilityWire,
    ProtocolVersion,
    capability_entries,
    logical_name,
    protocol,
    select_version,
    wire_name,
)

__all__ = [
    "ADVERTISED",
    "CAPABILITIES",
    "KNOWN_UNSERVED",
    "LEAF_2026_04_08",
    "ROOT",
    "SERVED",
    "VERSIONS",
    "CapabilityWire",
    "ProtocolVersion",
    "capability_entries",
    "from_wire",
    "logical_name",
    "protocol",
    "register_shape",
    "registered",
    "select_version",
    "to_wire",
    "wire_name",
]

"""How a capability registers its per-version wire shapes, and the one place they are applied.

A *kind* names a resource or request shape (``checkout``, ``order``, ``error``, ``checkout.request``,
``cart``, ``catalog.search`` ...). For each (kind, served version) a capability registers at most
two pure functions:

- ``response(body, pv) -> wire``: the version-neutral body (what the domain renders; it carries the
  caller's ``ucp`` envelope already) to what a caller of version ``pv`` receives;
- ``request(data, pv) -> neutral``: a request body as a caller of ``pv`` sends it to the neutral
  request shape the domain parses.

A kind with nothing registered for a version passes through unchanged (the identity). Functions
must be pure (no I/O, no clock) and must not mutate their input: bodies are shared by caches.

::

    from ucp_gateway.versions import register_shape
    register_shape("cart", "2026-08-25", response=cart_to_2026_08_25, request=cart_from_2026_08_25)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .table import VERSIONS, ProtocolVersion

__all__ = ["Projection", "from_wire", "register_shape", "registered", "to_wire"]

Projection = Callable[[Mapping[str, Any], ProtocolVersion], dict[str, Any]]

_RESPONSE: dict[tuple[str, str], Projection] = {}
_REQUEST: dict[tuple[str, str], Projection] = {}


def register_shape(
    kind: str, version: str, *, response: Projection | None = None, request: Projection | None = None
) -> None:
    """Register the wire shape of ``kind`` at ``version``. Raises KeyError for a version not in the
    table, ValueError when the (kind, version) already has a function of that direction (one place
    per version: a second registration is a bug, not an override)."""
    if version not in VERSIONS:
        raise KeyError(f"{version} is not a served version")
    for table, fn, what in ((_RESPONSE, response, "response"), (_REQUEST, request, "request")):
        if fn is None:
            continue
        if (kind, version) in table and table[(kind, version)] is not fn:
            raise ValueError(f"{kind} at {version} already has a {what} shape")
        table[(kind, version)] = fn


def to_wire(kind: str, body: Mapping[str, Any], version: str) -> dict[str, Any]:
    """``body`` (neutral) as a caller of ``version`` receives it. Unregistered: ``body`` itself."""
    fn = _RESPONSE.get((kind, version))
    return body if fn is None else fn(body, VERSIONS[version])  # type: ignore[return-value]


def from_wire(kind: str, data: Mapping[str, Any], version: str) -> dict[str, Any]:
    """A request body of a ``version`` caller in the neutral shape. Unregistered: ``data`` itself."""
    fn = _REQUEST.get((kind, version))
    return data if fn is None else fn(data, VERSIONS[version])  # type: ignore[return-value]


def registered() -> dict[str, dict[str, tuple[str, ...]]]:
    """``{kind: {version: ("response"?, "request"?)}}``: what is registered (docs, tests)."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for kind, version in sorted(set(_RESPONSE) | set(_REQUEST)):
        dirs = tuple(d for d, t in (("response", _RESPONSE), ("request", _REQUEST)) if (kind, version) in t)
        out.setdefault(kind, {})[version] = dirs
    return out

"""Access levels and proof kinds (pure): what a caller's identification earns, per company.

UCP identity linking "Access Levels" and the field's practice (Shopify's tiers, Google's merchant
guide): every request on a company's UCP routes resolves to one principal with one level:

- ``anonymous``: no proof (a claimed ``UCP-Agent`` profile at most);
- ``identified``: a platform proof that checked out: an RFC 9421 signature against the profile's keys,
  an ``X-API-Key``, an OAuth 2.0 client-credentials bearer token, an mTLS client certificate, a Web
  Bot Auth signature;
- ``linked``: reserved for buyer identity linking (a user token on top of a platform proof).

A proof that is present but wrong is refused (401), never read as a lower level. The company's
access table says which level each operation needs (:data:`OPERATIONS`, :data:`DEFAULT_LEVELS`;
``settings.access.levels`` overrides entries). :class:`ProofKind` is the small, closed set of
proof names that logs and metrics label by.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = [
    "ACCESS_LEVEL_HEADER",
    "DEFAULT_LEVELS",
    "OPEN_LEVELS",
    "OPERATIONS",
    "STRICT_LEVELS",
    "AccessLevel",
    "ProofKind",
    "at_least",
    "level_table",
    "permits",
]

#: The response header that echoes the caller's level (every answer on a company's UCP routes).
ACCESS_LEVEL_HEADER: Final = "UCP-Access-Level"


class AccessLevel(enum.StrEnum):
    ANONYMOUS = "anonymous"
    IDENTIFIED = "identified"
    LINKED = "linked"


class ProofKind(enum.StrEnum):
    """How a principal proved who it is (``none``: it did not)."""

    NONE = "none"
    SIGNATURE = "signature"  # RFC 9421 against the UCP-Agent profile's keys
    API_KEY = "api_key"
    OAUTH = "oauth"  # client-credentials bearer token issued by this gateway
    MTLS = "mtls"
    WEB_BOT_AUTH = "web_bot_auth"
    STAFF_TOKEN = "staff_token"  # noqa: S105 - a proof name: a company admin API token (staff)


_ORDER: Final = (AccessLevel.ANONYMOUS, AccessLevel.IDENTIFIED, AccessLevel.LINKED)

#: operation -> what it covers (the keys of an access table)
OPERATIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "discovery": "MCP discovery methods, the business profile, capability manifests",
        "catalog": "catalog search, lookup and product reads",
        "cart": "create, read, update and cancel carts",
        "checkout": "create, read, update and cancel checkout sessions",
        "checkout.complete": "complete a checkout (place the order)",
        "orders": "read orders",
    }
)

#: The defaults: anonymous agents browse and build a checkout; placing and reading orders needs a
#: platform proof (UCP order.md: Get Order MUST be authenticated). A non-buyer verb always needs a
#: staff or partner credential, whatever the table.
DEFAULT_LEVELS: Final[Mapping[str, AccessLevel]] = MappingProxyType(
    {
        "discovery": AccessLevel.ANONYMOUS,
        "catalog": AccessLevel.ANONYMOUS,
        "cart": AccessLevel.ANONYMOUS,
        "checkout": AccessLevel.ANONYMOUS,
        "checkout.complete": AccessLevel.IDENTIFIED,
        "orders": AccessLevel.IDENTIFIED,
    }
)

#: The table of signature policy ``off`` (development only: nothing is verified, so nothing is gated).
OPEN_LEVELS: Final[Mapping[str, AccessLevel]] = MappingProxyType(dict.fromkeys(OPERATIONS, AccessLevel.ANONYMOUS))

#: What a company whose table cannot be read gets (fail closed): everything but discovery identified.
STRICT_LEVELS: Final[Mapping[str, AccessLevel]] = MappingProxyType(
    {op: (AccessLevel.ANONYMOUS if op == "discovery" else AccessLevel.IDENTIFIED) for op in OPERATIONS}
)


def at_least(level: AccessLevel | str, floor: AccessLevel | str) -> bool:
    """``level`` >= ``floor`` in anonymous < identified < linked. Unknown names compare False."""
    try:
        return _ORDER.index(AccessLevel(level)) >= _ORDER.index(AccessLevel(floor))
    except ValueError:
        return False


def level_table(overrides: Mapping[str, str] | None) -> dict[str, AccessLevel]:
    """The defaults with a company's ``settings.access.levels`` entries applied. Raises ValueError
    naming an unknown operation or level (the settings check turns it into a 400)."""
    table = dict(DEFAULT_LEVELS)
    for op, level in (overrides or {}).items():
        if op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r} (one of {', '.join(OPERATIONS)})")
        try:
            table[op] = AccessLevel(level)
        except ValueError:
            raise ValueError(f"{op}: unknown access level {level!r} (anonymous, identified, linked)") from None
    return table


def permits(table: Mapping[str, AccessLevel], level: AccessLevel | str, operation: str) -> bool:
    """Whether a caller of ``level`` may run ``operation`` under ``table`` (an unknown operation:
    identified)."""
    return at_least(level, table.get(operation, AccessLevel.IDENTIFIED))

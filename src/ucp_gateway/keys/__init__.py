"""Per-company EC P-256 signing keys: lifecycle, encryption at rest, admin tokens.

Public API::

    active_signing_key(pool, company_id) -> SigningKey        # needs a Vault attached to the pool
    published_jwks(pool, company_id) -> list[dict]            # pending + active + rotating
    authenticate_admin(pool, authorization_header) -> StaffPrincipal
    rotate / apply_event / compromise_key / ensure_active_key / advance_company / rewrap_company
    KekRing, Vault, attach_vault; KeyState, KeyEvent, TRANSITIONS; ROLES, role_at_least, require_role
"""

from .active import NoActiveKey, SigningKey, active_signing_key
from .admin_tokens import (
    ROLES,
    StaffPrincipal,
    authenticate_admin,
    create_admin_token,
    require_role,
    role_at_least,
)
from .bootstrap import bootstrap_company_key
from .envelope import KekRing, KeyDecryptError
from .lifecycle import TRANSITIONS, IllegalTransition, KeyEvent, KeyState
from .repository import (
    CompanyKey,
    Vault,
    advance_company,
    apply_event,
    attach_vault,
    compromise_key,
    ensure_active_key,
    list_keys,
    published_jwks,
    rewrap_company,
    rotate,
)

__all__ = [
    "ROLES",
    "TRANSITIONS",
    "CompanyKey",
    "IllegalTransition",
    "KekRing",
    "KeyDecryptError",
    "KeyEvent",
    "KeyState",
    "NoActiveKey",
    "SigningKey",
    "StaffPrincipal",
    "Vault",
    "active_signing_key",
    "advance_company",
    "apply_event",
    "attach_vault",
    "authenticate_admin",
    "bootstrap_company_key",
    "compromise_key",
    "create_admin_token",
    "ensure_active_key",
    "list_keys",
    "published_jwks",
    "require_role",
    "rewrap_company",
    "role_at_least",
    "rotate",
]

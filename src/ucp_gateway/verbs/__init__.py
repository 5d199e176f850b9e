"""The verb runtime (solid-verbs): registry, manifest, one dispatcher with consent gates, receipts,
idempotency, transactions, revert and a hash-chained audit log.

Public API::

    from ucp_gateway.verbs import Registry, VerbPolicy, RiskClass, Principal, Call, Dispatcher
    registry.register(record, VerbPolicy(risk_class=RiskClass.WRITE_REVERSIBLE, ...), handler)
    envelope = await dispatcher.dispatch(Principal("staff", company_id, "admin", "u1", "http"),
                                         Call("crm_contact_update", {...}, confirm=True))
"""

from .context import RevertContext, VerbContext
from .decide import Call, Decision, Inputs, decide
from .dispatcher import Dispatcher
from .errors import REASONS, RegistrationError, VerbError
from .policy import (
    BLOCKED_NAMES,
    ROLES,
    TIERS,
    Consent,
    Principal,
    PrincipalLimit,
    RiskClass,
    VerbPolicy,
    format_money,
)
from .providers import PROVIDERS, build_registry
from .registry import Registry, Verb, shape_ref

__all__ = [
    "BLOCKED_NAMES",
    "PROVIDERS",
    "REASONS",
    "ROLES",
    "TIERS",
    "Call",
    "Consent",
    "Decision",
    "Dispatcher",
    "Inputs",
    "Principal",
    "PrincipalLimit",
    "RegistrationError",
    "Registry",
    "RevertContext",
    "RiskClass",
    "Verb",
    "VerbContext",
    "VerbError",
    "VerbPolicy",
    "build_registry",
    "decide",
    "format_money",
    "shape_ref",
]

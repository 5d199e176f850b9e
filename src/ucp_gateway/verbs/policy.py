"""Server-side verb policy: risk classes, roles, tiers, principals, blocked names, phrases (pure).

solid-verbs spec/consent.md: every write is classed READ < WRITE_REVERSIBLE < WRITE_FINANCIAL <
IRREVERSIBLE (plus BLOCKED), each class has a role floor (read_only < employee < admin < owner) and
a company-wide daily cap. The class is not part of the published VerbRecord (its schema is closed),
so it lives here, in a :class:`VerbPolicy` sidecar keyed by verb name (digest §8 G1).

Two kinds of principal (docs/architecture.md): company staff and partner agents (``kind`` "staff" /
"agent", the role hierarchy above) and buyer agents (``kind`` "buyer", role ``buyer``), who sit
outside the hierarchy, are admitted only to verbs whose policy lists them, are never counted
against company caps, and consent with their payment credential instead of a typed phrase.
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

__all__ = [
    "BLOCKED_NAMES",
    "BUYER_ROLE",
    "CLASS_FLOOR",
    "DEFAULT_DAILY_CAPS",
    "HUMAN_ONLY",
    "ROLES",
    "SURFACES",
    "TIERS",
    "Consent",
    "Principal",
    "PrincipalLimit",
    "RiskClass",
    "VerbPolicy",
    "format_money",
    "is_blocked_name",
    "normalize_name",
    "normalize_phrase",
    "role_at_least",
    "tier_at_least",
]

ROLES: tuple[str, ...] = ("read_only", "employee", "admin", "owner")  # ordered low -> high
BUYER_ROLE = "buyer"
TIERS: tuple[str, ...] = ("starter", "growth", "pro", "enterprise")  # ordered low -> high
SURFACES: tuple[str, ...] = ("http", "mcp_stdio", "webmcp", "ucp", "cli")
PrincipalKind = Literal["staff", "agent", "buyer"]


class RiskClass(enum.IntEnum):
    """Risk classes, ordered (solid-verbs spec/consent.md). BLOCKED is never dispatched."""

    READ = 0
    WRITE_REVERSIBLE = 1
    WRITE_FINANCIAL = 2
    IRREVERSIBLE = 3
    BLOCKED = 4


_NOT_WRITE = (RiskClass.READ, RiskClass.BLOCKED)  # read once (enum member lookups are slow)


class Consent(enum.StrEnum):
    """What consent a verb needs before it runs."""

    NONE = "none"  # READ
    CLICK = "click"  # confirm: true
    TYPED_PHRASE = "typed_phrase"  # preflight -> phrase + HMAC nonce -> confirm
    PAYMENT_CREDENTIAL = "payment_credential"  # buyer verbs: the handler checks the credential


CLASS_FLOOR: Mapping[RiskClass, str] = {
    RiskClass.READ: "read_only",
    RiskClass.WRITE_REVERSIBLE: "employee",
    RiskClass.WRITE_FINANCIAL: "admin",
    RiskClass.IRREVERSIBLE: "owner",
}
DEFAULT_CONSENT: Mapping[RiskClass, Consent] = {
    RiskClass.READ: Consent.NONE,
    RiskClass.WRITE_REVERSIBLE: Consent.CLICK,
    RiskClass.WRITE_FINANCIAL: Consent.TYPED_PHRASE,
    RiskClass.IRREVERSIBLE: Consent.TYPED_PHRASE,
}
#: classes a person confirms on a staff page, never the caller that asked (solid-verbs digest §8 G3)
HUMAN_ONLY: frozenset[RiskClass] = frozenset({RiskClass.WRITE_FINANCIAL, RiskClass.IRREVERSIBLE})
# spec/consent.md cap keys ada_writes_per_day / ada_financial_writes_per_day / ..._irreversible_...
DEFAULT_DAILY_CAPS: Mapping[str, int] = {"WRITE_REVERSIBLE": 100, "WRITE_FINANCIAL": 25, "IRREVERSIBLE": 10}

# spec/consent.md "Blocked verbs": never callable, whatever the role or confirmation.
BLOCKED_NAMES: frozenset[str] = frozenset(
    {"subscription_cancel_immediate", "customer_delete", "company_delete", "employee_terminate"}
)


def normalize_name(name: str) -> str:
    """Case- and separator-insensitive form: ``"Customer.Delete"`` -> ``"customer_delete"``."""
    return re.sub(r"[.\-\s]+", "_", name.strip().lower())


def is_blocked_name(name: str) -> bool:
    """True for a blocked name or any normalized variant of one (digest §8 G14 step 1)."""
    return _blocked(name) if type(name) is str else normalize_name(name) in BLOCKED_NAMES


@functools.lru_cache(maxsize=1024)  # pure; every dispatch checks its verb name
def _blocked(name: str) -> bool:
    return normalize_name(name) in BLOCKED_NAMES


def role_at_least(role: str, floor: str) -> bool:
    """Staff role comparison; unknown roles (and ``buyer``) are below every floor."""
    if role not in ROLES or floor not in ROLES:
        return False
    return ROLES.index(role) >= ROLES.index(floor)


_TIER_RANK = {t: i for i, t in enumerate(TIERS)}


def tier_at_least(tier: str, floor: str) -> bool:
    """Subscription tier comparison (starter < growth < pro < enterprise); unknown tier fails."""
    have, need = _TIER_RANK.get(tier), _TIER_RANK.get(floor)
    return have is not None and need is not None and have >= need


# ISO 4217 minor-unit exponents that are not 2 (the rest use 2).
_EXPONENT = {
    "JPY": 0,
    "KRW": 0,
    "VND": 0,
    "CLP": 0,
    "ISK": 0,
    "HUF": 2,
    "BHD": 3,
    "KWD": 3,
    "OMR": 3,
    "JOD": 3,
    "TND": 3,
}


def format_money(amount_minor: int, currency: str) -> str:
    """Render minor units for a phrase: ``(1250, "USD")`` -> ``"$12.50"``, ``(5000, "EUR")`` -> ``"EUR 50.00"``.

    Digest §8 G23: ``$X.YY`` for USD, the ISO code otherwise; exponent from ISO 4217.
    """
    cur = currency.upper()
    exp = _EXPONENT.get(cur, 2)
    sign = "-" if amount_minor < 0 else ""
    units, minor = divmod(abs(int(amount_minor)), 10**exp)
    text = f"{units}.{minor:0{exp}d}" if exp else str(units)
    return f"{sign}${text}" if cur == "USD" else f"{sign}{cur} {text}"


def normalize_phrase(text: str) -> str:
    """Phrase comparison form: NFC, stripped; comparison stays case-sensitive (digest §8 G23)."""
    return unicodedata.normalize("NFC", text).strip()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, bound by the transport from its credentials, never from arguments.

    Attributes:
        kind: "staff" (company user / admin token), "agent" (partner agent with a role),
            "buyer" (a UCP buyer agent acting for a shopper).
        company_id: the tenant the call runs in.
        role: a staff role (read_only/employee/admin/owner) or ``buyer``.
        subject: stable id of the caller (token id, user, agent profile URL).
        transport: the surface the call came through (http, mcp_stdio, webmcp, ucp, cli).
        human: a person confirming on a staff page in a browser session (the approval page of a
            human-only verb); never set from a bearer token, whatever the door (verbs/approvals.py).
    """

    kind: PrincipalKind
    company_id: UUID
    role: str
    subject: str
    transport: str = "http"
    human: bool = False

    @property
    def key(self) -> str:
        """The principal's identity for idempotency scope, nonces and per-principal limits."""
        return f"{self.kind}:{self.subject}"


@dataclass(frozen=True, slots=True)
class PrincipalLimit:
    """Per-principal daily limits (buyer agents): at most ``calls`` calls and ``amount`` minor units
    (read from the argument ``amount_arg``) per UTC day, per ``key`` (default: the verb name)."""

    calls: int | None = None
    amount: int | None = None
    amount_arg: str | None = None
    key: str | None = None


PhraseBuilder = Callable[[Mapping[str, Any]], str]  # (cleaned args) -> exact phrase, pure, ASCII
# (cleaned args, registry) -> (effective class, phrase or None); for verbs whose risk depends on
# their arguments, e.g. ``transaction`` takes the highest class of its steps. May raise VerbError.
Escalation = Callable[[Mapping[str, Any], Any], tuple["RiskClass", str | None]]
RevertHandler = Callable[..., Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class VerbPolicy:
    """Server-side policy of one verb (digest §8 G1).

    Attributes:
        risk_class: the consent/cap class.
        role_floor: the minimum staff role; raised to the class floor when lower.
        cap_class: which company daily cap counts it; default the class name for writes; None: no cap.
        consent: default from the class; buyer verbs use PAYMENT_CREDENTIAL.
        phrase: builds the typed phrase from the arguments (required for TYPED_PHRASE).
        revert: the revert handler (``async (ctx, entry) -> {"revert_action": ...}``); None: not revertible.
        principals: which principal kinds may call it.
        subagent: the sub-agent it belongs to (sales, ar, ap, commissions, service, compliance, marketing, ops).
        admin_only: never listed; unknown to non-admins.
        principal_limit: per-principal limits (buyer agents).
        audit_args: store (redacted) arguments in the audit row.
        escalate: argument-dependent class and phrase (see :data:`Escalation`).
        idempotency_scope: the key space of its idempotency keys, shared by the verbs that name the same
            scope (UCP: one key names one request of a caller, whatever the operation, so a key reused
            for another operation is a conflict); None: the verb's own name.
        binding: the protocol binding that alone runs it (``"ucp"``: the UCP shopping verbs, run by
            the UCP REST routes and the UCP MCP tools, which set up the request context the handler
            needs); it is offered on that surface only. None: any door of its surfaces. See
            :meth:`reachable`.
    """

    risk_class: RiskClass = RiskClass.READ
    role_floor: str = "read_only"
    cap_class: str | None = None
    consent: Consent | None = None
    phrase: PhraseBuilder | None = None
    revert: RevertHandler | None = None
    principals: frozenset[str] = field(default_factory=lambda: frozenset({"staff", "agent"}))
    subagent: str | None = None
    admin_only: bool = False
    principal_limit: PrincipalLimit | None = None
    audit_args: bool = True
    escalate: Escalation | None = None
    idempotency_scope: str | None = None
    binding: str | None = None

    def reachable(self, binding: str | None = None) -> bool:
        """Whether a call that comes through ``binding`` may run this verb: always, unless the verb
        has a :attr:`binding`, which must then be the caller's. ``binding`` None is a generic door:
        agent dispatch (http, cli, mcp_stdio), WebMCP, the verb tools of ``/ucp/mcp`` and the steps of
        ``transaction`` / ``macro.run``; only the binding's own code passes its name (``Call.binding``).

        The one predicate behind the refusal (decide: ``surface_not_allowed``) and the tool listings
        of the generic doors (``manifest.listed(tools=True)``): a tool that always refuses is not
        listed. The verb manifests (``GET /api/v1/agent/verbs``, ``capability.manifest``, the
        profile's ``verb_count``) still list the verb: it is a verb of its surface, run there through
        the binding."""
        return self.binding is None or self.binding == binding

    def effective_floor(self) -> str:
        floor = CLASS_FLOOR.get(self.risk_class, "owner")
        if self.role_floor in ROLES and ROLES.index(self.role_floor) > ROLES.index(floor):
            return self.role_floor
        return floor

    def effective_consent(self) -> Consent:
        return self.consent or DEFAULT_CONSENT.get(self.risk_class, Consent.TYPED_PHRASE)

    def effective_cap_class(self, principal_kind: str) -> str | None:
        """The company cap bucket for this caller; buyer agents are never counted (architecture.md)."""
        if principal_kind == "buyer" or self.risk_class in _NOT_WRITE:
            return None
        return self.cap_class or self.risk_class.name

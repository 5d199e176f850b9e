"""The dispatcher's decision as one pure function: values in, a :class:`Decision` out, no I/O.

The shell (``dispatcher.py``) loads what ``decide`` needs (company tier, cap usage, a stored
receipt for the idempotency key), calls it, and then persists what it returns. Check order
(digest §8 G14, the runtime's refusal reasons)::

    blocked_verb -> unknown_verb -> role_denied (principal kind) -> surface_not_allowed (surfaces,
    then a verb of a binding called from elsewhere: VerbPolicy.reachable) ->
    reserved_arg -> invalid_arguments -> tier_denied -> role_denied (role floor) ->
    idempotency replay / idempotency_conflict -> daily_cap_exceeded -> principal_limit_exceeded ->
    consent (dispatch_pending, consent_channel_required, nonce_invalid, nonce_expired,
    phrase_mismatch) -> execute

``nonce_used`` and the atomic cap reservation are decided by PostgreSQL at execution time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .consent import canonical_bytes, clean_args, issue_nonce, verify_nonce
from .errors import REASONS, VerbError
from .policy import (
    CLASS_FLOOR,
    HUMAN_ONLY,
    ROLES,
    Consent,
    Principal,
    RiskClass,
    is_blocked_name,
    normalize_phrase,
    role_at_least,
    tier_at_least,
)
from .registry import RESERVED_ARGS, Registry, Verb

__all__ = ["PHRASE_ATTEMPTS", "Call", "Decision", "Inputs", "cap_class_for", "decide", "gates"]

CONTROL_KEYS = ("confirm", "typed_phrase", "nonce", "idempotency_key")
#: wrong typed phrases allowed per consent nonce; the last one spends it (solid-verbs digest §8 G2)
PHRASE_ATTEMPTS = 3
# members read once: an enum member is a class attribute lookup through the enum's metaclass
_READ, _BLOCKED = RiskClass.READ, RiskClass.BLOCKED
_NOT_WRITE = (RiskClass.READ, RiskClass.BLOCKED)
_RESERVED = frozenset(RESERVED_ARGS)
_NONE, _CLICK, _PHRASE, _PAYMENT = Consent.NONE, Consent.CLICK, Consent.TYPED_PHRASE, Consent.PAYMENT_CREDENTIAL
_NO_STEP = (Consent.NONE, Consent.PAYMENT_CREDENTIAL)  # consents that need no confirm step
_HUMAN_ONLY = HUMAN_ONLY


@dataclass(frozen=True, slots=True)
class Call:
    """One dispatch request as a transport hands it over (control fields at the top level, G9).

    ``binding``: set only by a protocol binding's own code for the verbs it runs (the UCP REST and
    MCP shopping operations: ``"ucp"``), never from a request's fields; None from every generic door
    (VerbPolicy.reachable)."""

    verb: str
    args: Mapping[str, Any] = field(default_factory=dict)
    confirm: bool = False
    typed_phrase: str | None = None
    nonce: str | None = None
    idempotency_key: str | None = None
    binding: str | None = None


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the shell loaded for :func:`decide`.

    Attributes:
        company_tier: the company's subscription tier.
        cap_used / cap_limit: today's count and limit for the verb's cap class (limit None: no cap).
        principal_used: (calls, amount minor units) of this principal today for its limit key.
        stored_digest: args digest stored under the idempotency key, if a completed receipt exists.
        secrets / current_kid: nonce keys. fresh_nonce_id: 16 random hex chars for a new nonce.
        now: aware UTC datetime. nonce_ttl: seconds.
        deferred: the idempotency record was not read (the shell lets the execution's atomic key
            claim find a replay or conflict; ``stored_digest`` is then None).
    """

    company_tier: str
    secrets: Mapping[str, bytes]
    current_kid: str
    now: datetime
    fresh_nonce_id: str
    cap_used: int = 0
    cap_limit: int | None = None
    principal_used: tuple[int, int] = (0, 0)
    stored_digest: str | None = None
    nonce_ttl: int = 300
    deferred: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """``outcome``: deny | pending | replay | execute. Denials carry reason/message/hint/path."""

    outcome: Literal["deny", "pending", "replay", "execute"]
    risk_class: RiskClass | None = None
    reason: str | None = None
    message: str = ""
    hint: str | None = None
    path: str | None = None
    pending: dict[str, Any] | None = None
    approval: dict[str, Any] | None = None
    cap_class: str | None = None
    digest: str = ""
    #: canonical JSON bytes of the cleaned arguments that ``digest`` hashes (an execute only), so
    #: the audit entry need not write them again (outcome.audit_entry)
    args_json: bytes | None = field(default=None, repr=False, compare=False)
    #: a ``phrase_mismatch`` denial's nonce (authenticated: its MAC verified), whose wrong phrases
    #: the dispatcher counts (at most :data:`PHRASE_ATTEMPTS` per nonce)
    nonce_id: str | None = None

    def error(self) -> VerbError:
        return VerbError(self.reason or "denied", self.message, hint=self.hint, path=self.path)


def _deny(
    reason: str,
    message: str = "",
    *,
    hint: str | None = None,
    path: str | None = None,
    cls=None,
    digest="",
    nonce_id: str | None = None,
):
    return Decision(
        "deny", cls, reason, message or REASONS.get(reason, reason), hint, path, digest=digest, nonce_id=nonce_id
    )


def decide(
    verb: Verb | None, principal: Principal, call: Call, inputs: Inputs, registry: Registry | None = None
) -> Decision:
    """Decide one dispatch. Pure: the same inputs give the same decision.

    Args:
        verb: the registered verb, or None when the name is unknown.
        principal: the authenticated caller. call: the request. inputs: facts the shell loaded.
        registry: for argument-dependent classes (``VerbPolicy.escalate``).
    Returns: a :class:`Decision`; ``pending`` holds the typed phrase and a fresh nonce when the
        caller must confirm; ``approval`` records the consent trail of an ``execute``.
    """
    gate = _gates(verb, principal, call.verb, call.args, inputs.company_tier, registry, call.binding)
    if isinstance(gate, Decision):
        return gate
    assert verb is not None
    policy = verb.policy
    cls, phrase, digest, args, args_json = gate
    write = cls not in _NOT_WRITE
    if write and inputs.stored_digest is not None:
        if inputs.stored_digest != digest:
            return _deny(
                "idempotency_conflict",
                hint="Use a new idempotency key for other arguments.",
                cls=cls,
                digest=digest,
            )
        return Decision("replay", cls, digest=digest)
    cap_class = cap_class_for(verb, principal, cls)
    if cap_class and inputs.cap_limit is not None and inputs.cap_used >= inputs.cap_limit:
        return _deny(
            "daily_cap_exceeded",
            f"Daily {cap_class} cap of {inputs.cap_limit} reached.",
            hint="Caps reset at 00:00 UTC.",
            cls=cls,
            digest=digest,
        )
    lim = policy.principal_limit
    if lim is not None and principal.kind == "buyer":
        calls, amount = inputs.principal_used
        want = int(args.get(lim.amount_arg, 0)) if lim.amount_arg else 0
        if (lim.calls is not None and calls >= lim.calls) or (lim.amount is not None and amount + want > lim.amount):
            return _deny("principal_limit_exceeded", cls=cls, digest=digest)
    return _consent(verb, principal, call, inputs, cls, phrase, digest, cap_class, args_json)


def cap_class_for(verb: Verb, principal: Principal, cls: RiskClass) -> str | None:
    """The company cap bucket this call counts against (None: not counted)."""
    cap = verb.policy.effective_cap_class(principal.kind) if cls not in _NOT_WRITE else None
    if cap is not None and cls is not verb.policy.risk_class and cap == verb.policy.risk_class.name:
        cap = cls.name
    return cap


def gates(
    verb: Verb | None,
    principal: Principal,
    name: str,
    raw_args: Any,
    company_tier: str,
    registry: Registry | None = None,
) -> Decision | tuple[RiskClass, str | None, str, dict[str, Any]]:
    """The checks that need no stored state, in order: blocked, unknown, principal kind, surface
    (and binding: a step is called from no binding), reserved args, input_schema, class escalation,
    tier, role floor.

    Returns a deny :class:`Decision`, or ``(risk_class, phrase, args_digest, cleaned_args)``.
    Also used for transaction and macro steps.
    """
    gate = _gates(verb, principal, name, raw_args, company_tier, registry)
    return gate if isinstance(gate, Decision) else gate[:4]


def _gates(
    verb: Verb | None,
    principal: Principal,
    name: str,
    raw_args: Any,
    company_tier: str,
    registry: Registry | None = None,
    binding: str | None = None,
) -> Decision | tuple[RiskClass, str | None, str, dict[str, Any], bytes]:
    """:func:`gates`, also returning the canonical JSON bytes the digest hashes. ``binding``: the
    call's (:class:`Call`), None from a generic door."""
    if is_blocked_name(name) or (verb is not None and verb.policy.risk_class is _BLOCKED):
        return _deny("blocked_verb", hint="Use a permitted alternative (e.g. gdpr_delete_contact).")
    policy = verb.policy if verb else None
    if verb is None or policy is None or (policy.admin_only and not role_at_least(principal.role, "admin")):
        return _deny("unknown_verb", f"No verb named {name!r}.", hint="GET /api/v1/agent/verbs lists verbs.")
    if principal.kind not in policy.principals:
        return _deny("role_denied", f"{principal.kind} callers may not call {verb.name}.", cls=policy.risk_class)
    if principal.transport not in verb.record["surfaces"]:
        return _deny("surface_not_allowed", f"{verb.name} is not offered on {principal.transport}.")
    if not policy.reachable(binding):  # a verb of a binding, called through a generic door
        return _deny(
            "surface_not_allowed",
            f"{verb.name} runs only through the {policy.binding} binding, not as a generic verb.",
            hint="Call the binding's own operation (tools/list on its MCP endpoint names it).",
        )
    if type(raw_args) is not dict and not isinstance(raw_args, Mapping):
        return _deny("invalid_arguments", "args must be an object", path="$")
    # a dict's keys are what ``in`` tests; another mapping answers its own __contains__
    reserved = (
        [k for k in RESERVED_ARGS if k in raw_args]
        if type(raw_args) is not dict or not _RESERVED.isdisjoint(raw_args)
        else None
    )
    if reserved:
        return _deny("reserved_arg", f"{reserved[0]} is bound from the session", path=f"$.{reserved[0]}")
    args = clean_args(raw_args)
    problems = verb.check_args(args)
    if problems:
        return _deny(
            "invalid_arguments",
            problems[0].message,
            path=problems[0].path,
            hint=f"See input_schema: GET /api/v1/agent/verbs/{verb.name}",
        )
    try:
        args_json = canonical_bytes(args)
        digest = hashlib.sha256(args_json).hexdigest()  # consent.args_digest of clean args
    except (TypeError, ValueError):  # NaN, Infinity or non-JSON values
        return _deny("invalid_arguments", "arguments must be plain JSON (no NaN or Infinity)", path="$")
    cls, phrase = policy.risk_class, None
    try:
        if policy.escalate is not None:
            cls, phrase = policy.escalate(args, registry)
        elif policy.phrase is not None:
            phrase = policy.phrase(args)
    except VerbError as exc:
        return _deny(exc.reason, exc.message, hint=exc.hint, path=exc.path, cls=cls, digest=digest)
    if not tier_at_least(company_tier, verb.record["tier_floor"]):
        return _deny(
            "tier_denied",
            f"{verb.name} needs the {verb.record['tier_floor']} tier.",
            hint="Upgrade the subscription tier.",
            cls=cls,
            digest=digest,
        )
    if principal.kind != "buyer":
        floor = max(policy.effective_floor(), CLASS_FLOOR.get(cls, "owner"), key=ROLES.index)
        if not role_at_least(principal.role, floor):
            return _deny("role_denied", f"{verb.name} needs role {floor} or higher.", cls=cls, digest=digest)
    return cls, phrase, digest, args, args_json


def _consent(
    verb: Verb, principal: Principal, call: Call, inputs: Inputs, cls, phrase, digest, cap_class, args_json=None
) -> Decision:
    policy = verb.policy
    consent = policy.effective_consent()
    if cls is not policy.risk_class and consent is not _PAYMENT:
        consent = _PHRASE if phrase is not None else (_CLICK if cls else _NONE)
    if consent in _NO_STEP:
        return Decision("execute", cls, cap_class=cap_class, digest=digest, approval=None, args_json=args_json)
    remaining = None if inputs.cap_limit is None or not cap_class else max(inputs.cap_limit - inputs.cap_used, 0)
    base = {"risk_class": cls.name, "role_floor": policy.effective_floor(), "cap_remaining": remaining}
    if consent is _CLICK:
        if not call.confirm:
            return Decision(
                "pending",
                cls,
                "dispatch_pending",
                "Nothing was executed: confirm to run this write.",
                "Call again with confirm: true.",
                pending={**base, "confirm": "click"},
                cap_class=cap_class,
                digest=digest,
            )
        return Decision(
            "execute", cls, cap_class=cap_class, digest=digest, approval={"confirm": "click"}, args_json=args_json
        )
    assert phrase is not None
    if cls in _HUMAN_ONLY and not principal.human:
        # G3: money movement and irreversible writes are confirmed by a person on the approval page
        # (the shell adds approval_id / approval_url), never by the caller that asked
        pending = {**base, "confirm": "human", "required_phrase": phrase}
        hint = "A person confirms it on the approval page: open pending.approval_url."
        if call.confirm:
            return Decision(
                "deny",
                cls,
                "consent_channel_required",
                REASONS["consent_channel_required"],
                hint,
                pending=pending,
                cap_class=cap_class,
                digest=digest,
            )
        return Decision(
            "pending",
            cls,
            "dispatch_pending",
            "Nothing was executed: a person must confirm this on the approval page.",
            hint,
            pending=pending,
            cap_class=cap_class,
            digest=digest,
        )
    now_s = int(inputs.now.timestamp())
    ckey = str(principal.company_id)
    if not call.confirm:
        secret = inputs.secrets[inputs.current_kid]
        nonce = issue_nonce(
            secret,
            verb=verb.name,
            digest=digest,
            company_id=ckey,
            principal=principal.key,
            phrase=phrase,
            issued_at=now_s,
            nonce_id=inputs.fresh_nonce_id,
        )
        expires = datetime.fromtimestamp(now_s + inputs.nonce_ttl, UTC).isoformat().replace("+00:00", "Z")
        pending = {
            **base,
            "confirm": "typed_phrase",
            "required_phrase": phrase,
            "nonce": nonce,
            "expires_at": expires,
        }
        return Decision(
            "pending",
            cls,
            "dispatch_pending",
            "Nothing was executed: the human must type the phrase.",
            f'Show the phrase verbatim; call again with confirm: true, typed_phrase: "{phrase}" and the nonce.',
            pending=pending,
            cap_class=cap_class,
            digest=digest,
        )
    if not call.nonce:
        return _deny(
            "nonce_invalid",
            "confirm needs the nonce from the preflight.",
            hint="Call without confirm to get a phrase and nonce.",
            cls=cls,
            digest=digest,
        )
    check = verify_nonce(
        call.nonce,
        inputs.secrets,
        verb=verb.name,
        digest=digest,
        company_id=ckey,
        principal=principal.key,
        phrase=phrase,
        now=now_s,
        ttl=inputs.nonce_ttl,
    )
    if not check.ok:
        hint = "Call again without confirm for a fresh phrase and nonce."
        return _deny(check.reason or "nonce_invalid", hint=hint, cls=cls, digest=digest)
    if normalize_phrase(call.typed_phrase or "") != phrase:
        return _deny(
            "phrase_mismatch",
            "The typed phrase differs from the required phrase.",
            hint=f'Type exactly: "{phrase}"',
            cls=cls,
            digest=digest,
            nonce_id=check.nonce_id,
        )
    approval = {
        "confirm": "typed_phrase",
        "nonce_id": check.nonce_id,
        "issued_at": check.issued_at,
        "approved_by": principal.key,
        "phrase": phrase,
    }
    return Decision("execute", cls, cap_class=cap_class, digest=digest, approval=approval, args_json=args_json)

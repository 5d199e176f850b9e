"""The pure decision function: every reason it can give, and the nonce (no database, no clock)."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from ucp_gateway.verbs import (
    Call,
    Inputs,
    Principal,
    PrincipalLimit,
    Registry,
    RiskClass,
    VerbPolicy,
    build_registry,
    decide,
    format_money,
)
from ucp_gateway.verbs.consent import args_digest, issue_nonce, key_id, verify_nonce

NOW = datetime(2026, 4, 8, 12, 0, tzinfo=UTC)
SECRET = b"s" * 32
KID = key_id(SECRET)
CO = uuid.UUID(int=1)
REG = build_registry()
REFUND = {"order_id": "ord_42", "amount": 1250, "currency": "USD"}


def P(role="owner", kind="staff", subject="alice", transport="http", company=CO, human=False):
    return Principal(kind, company, role, subject, transport, human)


def inp(**kw):
    base = {
        "company_tier": "growth",
        "secrets": {KID: SECRET},
        "current_kid": KID,
        "now": NOW,
        "fresh_nonce_id": "0123456789abcdef",
    }
    return Inputs(**{**base, **kw})


def D(verb, args=None, p=None, inputs=None, reg=REG, **call):
    return decide(reg.get(verb), p or P(), Call(verb, args if args is not None else {}, **call), inputs or inp(), reg)


def test_money_and_phrase():
    assert format_money(1250, "USD") == "$12.50"
    assert format_money(5000, "EUR") == "EUR 50.00"
    assert format_money(500, "JPY") == "JPY 500"
    assert format_money(1234, "KWD") == "KWD 1.234"
    d = D("payments.refund", REFUND)
    assert d.outcome == "pending" and d.pending["required_phrase"] == "REFUND $12.50 on order #ord_42"


@pytest.mark.parametrize(
    "name",
    [
        "subscription_cancel_immediate",
        "customer_delete",
        "company_delete",
        "employee_terminate",
        "customer.delete",
        "Customer_Delete",
        "COMPANY.DELETE",
    ],
)
@pytest.mark.parametrize("role", ["read_only", "employee", "admin", "owner"])
def test_blocked_whatever_the_role(name, role):
    d = D(name, {}, P(role), confirm=True, typed_phrase="x", nonce="y")
    assert (d.outcome, d.reason) == ("deny", "blocked_verb")


def test_blocked_class():
    r = Registry()
    r.register(
        {
            "name": "ops.wipe",
            "description": "x",
            "shape": "receipt",
            "side_effects": "write",
            "input_schema": {"type": "object"},
        },
        VerbPolicy(RiskClass.BLOCKED),
        lambda c: None,
    )
    assert D("ops.wipe", {}, reg=r).reason == "blocked_verb"


def test_unknown_and_admin_only():
    assert D("nope.nothing").reason == "unknown_verb"
    r = Registry()
    r.register(
        {"name": "ops.stats", "description": "x", "shape": "aggregate", "input_schema": {"type": "object"}},
        VerbPolicy(admin_only=True),
        lambda c: None,
    )
    assert D("ops.stats", {}, P("employee"), reg=r).reason == "unknown_verb"
    assert D("ops.stats", {}, P("admin"), reg=r).outcome == "execute"


def test_surface_reserved_and_arguments():
    assert D("payments.refund", REFUND, P(transport="ucp")).reason == "surface_not_allowed"
    d = D("customer.context", {"customer_id": "c", "company_id": "other"})
    assert (d.reason, d.path) == ("reserved_arg", "$.company_id")
    d = D("customer.context", {"customer_id": 5})
    assert d.reason == "invalid_arguments" and d.path == "$.customer_id"
    d = D("transaction", {"steps": [{"verb": "crm_contact_update", "args": {}, "bogus": 1}]})
    assert d.reason == "invalid_arguments" and d.path.startswith("$.steps[0]")
    assert D("customer.context", {}).path == "$"


def test_tier_denied():
    r = Registry()
    r.register(
        {
            "name": "x.pro_report",
            "description": "x",
            "shape": "aggregate",
            "tier_floor": "pro",
            "input_schema": {"type": "object"},
        },
        VerbPolicy(),
        lambda c: None,
    )
    assert D("x.pro_report", {}, reg=r).reason == "tier_denied"
    assert D("x.pro_report", {}, reg=r, inputs=inp(company_tier="enterprise")).outcome == "execute"


@pytest.mark.parametrize(
    "verb,args,floor",
    [
        ("customer.context", {"customer_id": "c"}, "read_only"),
        ("crm_contact_update", {"contact_id": 1, "status": "vip"}, "employee"),
        ("payments.refund", REFUND, "admin"),
        ("gdpr_delete_contact", {"contact_id": 1}, "owner"),
    ],
)
def test_role_floors(verb, args, floor):
    roles = ["read_only", "employee", "admin", "owner"]
    for role in roles:
        d = D(verb, args, P(role))
        if roles.index(role) < roles.index(floor):
            assert d.reason == "role_denied", (verb, role)
        else:
            assert d.outcome in ("execute", "pending"), (verb, role, d)


def test_click_consent():
    a = {"contact_id": 1, "status": "vip"}
    d = D("crm_contact_update", a, P("employee"))
    assert (d.outcome, d.reason, d.pending["confirm"]) == ("pending", "dispatch_pending", "click")
    assert D("crm_contact_update", {**a, "_confirmed": True}, P("employee")).outcome == "pending"
    assert D("crm_contact_update", a, P("employee"), confirm=True).outcome == "execute"


def _nonce(**kw):
    base = {
        "verb": "payments.refund",
        "digest": args_digest(REFUND),
        "company_id": str(CO),
        "principal": "staff:alice",
        "phrase": "REFUND $12.50 on order #ord_42",
        "issued_at": int(NOW.timestamp()),
        "nonce_id": "0123456789abcdef",
    }
    return issue_nonce(SECRET, **{**base, **kw})


def confirm(args=REFUND, p=None, phrase="REFUND $12.50 on order #ord_42", nonce=None, inputs=None):
    """A confirm on the human channel (the approval page), where a typed phrase is entered."""
    p = p or P(human=True)
    return D("payments.refund", args, p, inputs, confirm=True, typed_phrase=phrase, nonce=nonce or _nonce())


def test_typed_phrase_happy_path():
    pre = D("payments.refund", REFUND, P(human=True))
    d = confirm(nonce=pre.pending["nonce"])
    assert d.outcome == "execute" and d.approval["nonce_id"] == "0123456789abcdef"
    assert confirm(phrase="  REFUND $12.50 on order #ord_42 ").outcome == "execute"  # NFC + strip


def test_nonce_failures():
    assert confirm(phrase="refund $12.50 on order #ord_42").reason == "phrase_mismatch"
    assert confirm(args={**REFUND, "amount": 1300}).reason == "nonce_invalid"  # other arguments
    assert confirm(p=P(subject="bob", human=True)).reason == "nonce_invalid"  # other principal
    assert confirm(p=P(company=uuid.UUID(int=2), human=True)).reason == "nonce_invalid"  # other company
    assert confirm(nonce=_nonce(verb="gdpr_delete_contact")).reason == "nonce_invalid"  # other verb
    tampered = _nonce()[:-2] + ("AA" if not _nonce().endswith("AA") else "BB")
    assert confirm(nonce=tampered).reason == "nonce_invalid"
    assert confirm(nonce="v1.garbage").reason == "nonce_invalid"
    missing = D("payments.refund", REFUND, P(human=True), confirm=True, typed_phrase="x")
    assert missing.reason == "nonce_invalid"
    other_key = issue_nonce(
        b"t" * 32,
        verb="payments.refund",
        digest=args_digest(REFUND),
        company_id=str(CO),
        principal="staff:alice",
        phrase="REFUND $12.50 on order #ord_42",
        issued_at=int(NOW.timestamp()),
        nonce_id="0123456789abcdef",
    )
    assert confirm(nonce=other_key).reason == "nonce_invalid"
    late = inp(now=NOW + timedelta(seconds=301))
    assert confirm(inputs=late).reason == "nonce_expired"
    assert confirm(inputs=inp(now=NOW + timedelta(seconds=300))).outcome == "execute"


@pytest.mark.parametrize("transport", ["http", "mcp_stdio", "webmcp", "cli"])
@pytest.mark.parametrize("verb,args", [("payments.refund", REFUND), ("gdpr_delete_contact", {"contact_id": 42})])
def test_human_only_verbs_are_never_confirmed_by_the_caller(transport, verb, args):
    """G3: a bearer-token caller (any door) gets a pending approval for a person, no nonce; its own
    confirm, even with a nonce minted for it and the exact phrase, is consent_channel_required."""
    p = P(transport=transport)
    pre = D(verb, args, p)
    assert pre.outcome == "pending" and pre.pending["confirm"] == "human" and "nonce" not in pre.pending
    phrase = pre.pending["required_phrase"]
    nonce = _nonce(verb=verb, digest=args_digest(args), phrase=phrase)
    d = D(verb, args, p, confirm=True, typed_phrase=phrase, nonce=nonce)
    assert d.outcome == "deny" and d.reason == "consent_channel_required" and d.pending["confirm"] == "human"
    # the same call on the human channel runs
    human = P(transport=transport, human=True)
    assert D(verb, args, human, confirm=True, typed_phrase=phrase, nonce=nonce).outcome == "execute"


def test_reversible_writes_keep_the_click_on_every_channel():
    d = D("crm_contact_update", {"contact_id": 1, "status": "vip"}, P("employee", transport="cli"))
    assert d.outcome == "pending" and d.pending["confirm"] == "click"


def test_verify_nonce_rotation():
    prev = b"p" * 32
    token = issue_nonce(
        prev,
        verb="v",
        digest="d",
        company_id="c",
        principal="p",
        phrase="X",
        issued_at=100,
        nonce_id="00000000000000ff",
    )
    keys = {KID: SECRET, key_id(prev): prev}
    assert verify_nonce(token, keys, verb="v", digest="d", company_id="c", principal="p", phrase="X", now=120).ok
    assert not verify_nonce(
        token, {KID: SECRET}, verb="v", digest="d", company_id="c", principal="p", phrase="X", now=120
    ).ok


def test_idempotency_and_caps():
    a = {"contact_id": 1, "status": "vip"}
    same = args_digest(a)
    assert D("crm_contact_update", a, inputs=inp(stored_digest=same)).outcome == "replay"
    assert D("crm_contact_update", a, inputs=inp(stored_digest="other")).reason == "idempotency_conflict"
    d = D("crm_contact_update", a, inputs=inp(cap_used=100, cap_limit=100), confirm=True)
    assert d.reason == "daily_cap_exceeded"
    d = D("crm_contact_update", a, inputs=inp(cap_used=99, cap_limit=100), confirm=True)
    assert d.outcome == "execute" and d.cap_class == "WRITE_REVERSIBLE"
    assert D("payments.refund", REFUND, inputs=inp(cap_used=25, cap_limit=25)).reason == "daily_cap_exceeded"
    # a replay is answered before the cap: it costs nothing
    assert D("crm_contact_update", a, inputs=inp(stored_digest=same, cap_used=100, cap_limit=100)).outcome == "replay"


def test_transaction_escalates_to_highest_step():
    steps = {
        "steps": [
            {"verb": "crm_contact_update", "args": {"contact_id": 1, "status": "vip"}},
            {"verb": "payments.refund", "args": REFUND},
        ]
    }
    d = D("transaction", steps, P("admin"))
    assert (
        d.risk_class is RiskClass.WRITE_FINANCIAL and d.pending["required_phrase"] == "REFUND $12.50 on order #ord_42"
    )
    assert D("transaction", steps, P("employee")).reason == "role_denied"
    bad = {"steps": [{"verb": "gdpr_delete_contact", "args": {"contact_id": 1}}]}
    assert D("transaction", bad).reason == "step_class_not_allowed"


def test_buyer_principal():
    r = Registry()
    r.register(
        {
            "name": "checkout.complete",
            "description": "Pay.",
            "shape": "receipt",
            "side_effects": "write",
            "input_schema": {"type": "object", "properties": {"amount": {"type": "integer"}}},
        },
        VerbPolicy(
            RiskClass.WRITE_FINANCIAL,
            principals=frozenset({"buyer"}),
            consent="payment_credential",
            principal_limit=PrincipalLimit(calls=3, amount=10000, amount_arg="amount"),
        ),
        lambda c: None,
    )
    buyer = P("buyer", kind="buyer", subject="https://agent.example/profile", transport="ucp")
    d = D("checkout.complete", {"amount": 500}, buyer, reg=r)
    assert d.outcome == "execute" and d.cap_class is None  # no typed phrase, no company cap
    assert D("checkout.complete", {"amount": 500}, P("owner"), reg=r).reason == "role_denied"
    assert (
        D("checkout.complete", {"amount": 500}, buyer, reg=r, inputs=inp(principal_used=(3, 0))).reason
        == "principal_limit_exceeded"
    )
    assert (
        D("checkout.complete", {"amount": 600}, buyer, reg=r, inputs=inp(principal_used=(1, 9500))).reason
        == "principal_limit_exceeded"
    )
    assert D("customer.context", {"customer_id": "c"}, buyer).reason == "role_denied"  # staff verb
    assert D("capability.manifest", {}, buyer).outcome == "execute"


def test_a_verb_of_a_binding_runs_only_through_it():
    """VerbPolicy.binding (the UCP shopping verbs: ``"ucp"``): one predicate, VerbPolicy.reachable,
    refuses a generic door's call (surface_not_allowed) and keeps the verb
    out of the generic doors' tool listings, while the verb manifest still lists it."""
    from ucp_gateway.verbs.errors import RegistrationError
    from ucp_gateway.verbs.manifest import listed

    r = Registry()
    record = {
        "name": "shop.buy",
        "description": "Buy.",
        "shape": "receipt",
        "side_effects": "write",
        "surfaces": ["ucp"],
        "input_schema": {"type": "object", "properties": {"amount": {"type": "integer"}}},
    }
    policy = VerbPolicy(RiskClass.WRITE_REVERSIBLE, principals=frozenset({"buyer"}), consent="none", binding="ucp")
    r.register(record, policy, lambda c: None)
    buyer = P("buyer", kind="buyer", subject="https://agent.example/profile", transport="ucp")
    assert D("shop.buy", {"amount": 1}, buyer, reg=r, binding="ucp").outcome == "execute"
    for other in (None, "webmcp"):
        d = D("shop.buy", {"amount": 1}, buyer, reg=r, binding=other)
        assert (d.outcome, d.reason) == ("deny", "surface_not_allowed"), other
    assert policy.reachable("ucp") and not policy.reachable() and VerbPolicy().reachable()
    assert [v.name for v in listed(r, surface="ucp")] == ["shop.buy"]  # a verb of its surface
    assert listed(r, surface="ucp", tools=True) == []  # no generic door offers it as a tool
    # no other surface's manifest (MCP stdio, CLI, WebMCP) may list a verb only its binding runs
    with pytest.raises(RegistrationError, match="surfaces"):
        r.register({**record, "name": "shop.buy2", "surfaces": ["ucp", "mcp_stdio"]}, policy, lambda c: None)

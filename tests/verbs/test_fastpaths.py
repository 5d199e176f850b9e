"""The dispatcher's shortcuts give what the long way gives: the remembered iso() text and datetime,
and the audit entry's args taken from the digest's JSON."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ucp_gateway.tenancy import Company
from ucp_gateway.verbs import audit
from ucp_gateway.verbs.audit import _parse_at, iso, redact, redaction_free
from ucp_gateway.verbs.consent import canonical_bytes, canonical_json, clean_args
from ucp_gateway.verbs.decide import Call, Decision
from ucp_gateway.verbs.outcome import audit_entry, success_envelope
from ucp_gateway.verbs.policy import Principal, RiskClass


@pytest.mark.parametrize(
    "dt",
    [
        datetime(2026, 4, 8, 12, 0, 0, 123456, tzinfo=UTC),
        datetime(2026, 4, 8, 12, 0, 0, tzinfo=UTC),  # no fraction: isoformat omits it
        datetime(2026, 4, 8, 13, 0, 0, tzinfo=timezone(timedelta(hours=1))),  # same instant, other text
        datetime(2026, 4, 8, 12, 0, 0),  # naive
    ],
)
def test_iso_and_parse_at_match_the_long_way(dt):
    text = iso(dt)
    assert text == dt.isoformat().replace("+00:00", "Z")
    assert iso(dt) is text  # remembered
    back = _parse_at(text)
    assert back == datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert back.utcoffset() == datetime.fromisoformat(text.replace("Z", "+00:00")).utcoffset()
    # an equal text that is not the remembered object is parsed
    copy = "".join(list(text))
    assert copy is not text and _parse_at(copy) == back


def test_iso_keeps_equal_instants_in_other_zones_apart():
    a = datetime(2026, 4, 8, 12, 0, tzinfo=UTC)
    b = datetime(2026, 4, 8, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    assert a == b
    assert iso(a) == "2026-04-08T12:00:00Z" and iso(b) == "2026-04-08T13:00:00+01:00"
    assert iso(a) == "2026-04-08T12:00:00Z"


json_leaf = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8)
keys = st.sampled_from(["a", "b", "_c", "token", "card_no", "body_text", "id", "Password"]) | st.text(max_size=5)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_redaction_free_means_redact_changes_nothing(value):
    if redaction_free(value):
        assert redact(value) == value
        assert canonical_json(redact(value)) == canonical_json(value)


def test_redaction_free_examples():
    assert redaction_free({"method": "PUT", "body_text": '{"a":1}', "n": [1, {"x": None}]})
    assert not redaction_free({"payment": {"card": "4111"}})
    assert not redaction_free([{"token": 1}])
    assert not redaction_free({"t": (1, 2)})  # a tuple: not known, the long way decides


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, json_values, max_size=5))
def test_entry_args_from_the_digest_json_equal_the_redacted_args(args):
    principal = Principal("buyer", uuid.UUID(int=1), "buyer", "https://agent.example/p", "ucp")
    company = Company(uuid.UUID(int=1), "s", "S", "pro", "optional")
    now = datetime(2026, 4, 8, 12, 0, tzinfo=UTC)
    call = Call("x.y", args)
    plain = Decision("execute", RiskClass.WRITE_REVERSIBLE, digest="d")
    fast = Decision("execute", RiskClass.WRITE_REVERSIBLE, digest="d", args_json=canonical_bytes(clean_args(args)))
    want = audit_entry(principal, company, call, None, plain, "allowed", "completed", now)
    got = audit_entry(principal, company, call, None, fast, "allowed", "completed", now)
    assert got == want
    assert want["args"] == canonical_json(redact(args))[:4000]


def test_append_args_time_is_the_entry_time():
    now = datetime.now(UTC)
    entry = {"at": iso(now), "verb": "v", "decision": "allowed", "status": "completed", "principal": {"subject": "s"}}
    args = audit.append_args(uuid.UUID(int=3), entry)
    assert args[1] == now and args[1].utcoffset() == timedelta(0)
    entry["at"] = "".join(list(entry["at"]))  # not the remembered object: parsed
    assert audit.append_args(uuid.UUID(int=3), entry)[1] == now


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(keys, json_leaf, max_size=6))
def test_clean_args_drops_exactly_the_underscore_keys(args):
    got = clean_args(args)
    assert got == {k: v for k, v in args.items() if not k.startswith("_")}
    assert list(got) == [k for k in args if not k.startswith("_")]
    assert got is not args


def test_clean_args_refuses_non_text_keys_as_before():
    with pytest.raises(AttributeError):
        clean_args({1: "x"})


def test_verb_may_mint_follows_its_policy():
    from ucp_gateway.verbs import build_registry
    from ucp_gateway.verbs.policy import Consent

    for verb in build_registry():
        p = verb.policy
        want = p.escalate is not None or p.phrase is not None or p.effective_consent() is Consent.TYPED_PHRASE
        assert verb.may_mint is want
    assert any(v.may_mint for v in build_registry()) and not all(v.may_mint for v in build_registry())


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, json_values, max_size=5))
def test_plain_audit_args_means_the_digest_json_is_the_audit_text(args):
    from ucp_gateway.verbs.audit import plain_audit_args

    if plain_audit_args(args):
        assert canonical_bytes(clean_args(args)).decode() == canonical_json(redact(args))
        assert clean_args(args) == args


def test_plain_audit_args_examples():
    from ucp_gateway.verbs.audit import plain_audit_args

    assert plain_audit_args({"method": "PUT", "body_text": "{}", "id": "c1"})
    assert not plain_audit_args({"_confirmed": True, "id": "c1"})
    assert not plain_audit_args({"id": "c1", "x": {"api_token": "t"}})
    assert not plain_audit_args({"Authorization": "b"})


def _success_reference(verb, result, audit_id, key, entry, now):
    """outcome.success_envelope as it was written before (the dict-merge form)."""
    env = {"ok": True, "verb": verb.name, "audit_id": audit_id}
    if key is not None:
        receipt = {"status": "completed", "audit_id": audit_id, "idempotency_key": key, "timestamp": iso(now)}
        if entry.get("rollback_handle"):
            receipt["rollback_handle"] = entry["rollback_handle"]
        result = {**receipt, **result}
        if verb.shape != "revert":
            result["audit_id"] = audit_id
        env.update(
            idempotency_key=key,
            **({"rollback_handle": receipt["rollback_handle"]} if "rollback_handle" in receipt else {}),
        )
    env["result"] = result
    return env


@pytest.mark.parametrize("shape", ["receipt", "revert", "aggregate"])
@pytest.mark.parametrize("key", [None, "k1"])
@pytest.mark.parametrize("handle", [None, "", "checkout.update:k1"])
@pytest.mark.parametrize(
    "result",
    [{"http_status": 200, "body": "{}"}, {"status": "x", "audit_id": 9, "rollback_handle": "h2", "z": [1]}, {}],
)
def test_success_envelope_keeps_its_fields_and_order(shape, key, handle, result):
    class _Verb:
        name = "checkout.update"

    verb = _Verb()
    verb.shape = shape
    now = datetime(2026, 4, 8, 12, 0, 0, 5, tzinfo=UTC)
    entry = {"rollback_handle": handle}
    got = success_envelope(verb, dict(result), 7, key, entry, now)
    want = _success_reference(verb, dict(result), 7, key, entry, now)
    assert got == want
    assert list(got) == list(want) and list(got["result"]) == list(want["result"])

"""Instructions (or CPU) of the verb runtime's own Python per checkout request, without I/O.

What a ``checkout.update`` dispatch adds to the direct path besides its SQL, step by step, on
realistic values (a real update body, a 1.5 kB checkout answer): the transport's Principal and
Call, decide's inputs and decision, the handler context, the verb result, the audit entry, the
receipt envelope, the audit append's arguments, the stored envelope's jsonb text and the HTTP
answer taken from the envelope; ``all`` runs them in a row as a dispatch does.

CPU per step (thread time, min over rounds; noisy on a busy machine)::

    python bench/verbs_pieces.py [--n 20000]

Instructions per step (valgrind; deterministic, unlike a whole flow's count)::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/vp.out \\
        python bench/verbs_pieces.py --n 2000 --callgrind
    # one dump per step (/tmp/vp.out.N, "desc: Trigger: dump <step>"): totals / --n
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import checkout_flow as cf  # the flow's request bodies

from ucp_gateway.commerce.service import Outcome
from ucp_gateway.commerce.verbs import envelope_body, provide, result_of
from ucp_gateway.config import Settings
from ucp_gateway.jsonbody import db_dumps
from ucp_gateway.tenancy import Company
from ucp_gateway.verbs import Dispatcher, Principal, build_registry
from ucp_gateway.verbs.audit import append_args
from ucp_gateway.verbs.context import VerbContext
from ucp_gateway.verbs.decide import Call, decide
from ucp_gateway.verbs.outcome import audit_entry, success_envelope
from ucp_gateway.verbs.policy import BUYER_ROLE

UPDATE = cf.update_body("pot_ceramic")
ANSWER = {
    "id": "chk_0123456789abcdef",
    "status": "ready_for_complete",
    "currency": "USD",
    "line_items": [
        {
            "id": "li_1",
            "item": {"id": "pot_ceramic", "title": 'Ceramic pot "large"', "price": 2500},
            "quantity": 1,
            "totals": [{"type": "subtotal", "amount": 2500}, {"type": "total", "amount": 2500}],
        }
    ],
    "totals": [
        {"type": "subtotal", "amount": 2500, "display_text": "Subtotal"},
        {"type": "discount", "amount": 250},
        {"type": "fulfillment", "amount": 500},
        {"type": "total", "amount": 2750},
    ],
    "links": [{"type": "terms_of_service", "url": "https://shop.example/terms"}],
    "messages": [],
    "ucp": {"version": "2026-04-08", "capabilities": {"dev.ucp.shopping.checkout": [{"version": "2026-04-08"}]}},
    "fulfillment": {
        "methods": [
            {
                "id": "m1",
                "type": "shipping",
                "line_item_ids": ["li_1"],
                "destinations": [
                    {"id": "d", "street_address": "1 Elm St", "address_country": "US", "postal_code": "62704"}
                ],
                "selected_destination_id": "d",
                "groups": [
                    {
                        "id": "g1",
                        "line_item_ids": ["li_1"],
                        "options": [
                            {"id": "std-ship", "title": "Standard", "totals": [{"type": "total", "amount": 500}]},
                            {"id": "exp-ship", "title": "Express", "totals": [{"type": "total", "amount": 1500}]},
                        ],
                        "selected_option_id": "std-ship",
                    }
                ],
            }
        ]
    },
    "discounts": {"codes": ["10OFF"], "applied": [{"code": "10OFF", "title": "10% off", "amount": 250}]},
    "expires_at": "2026-12-01T00:00:00Z",
}


class _Pool:  # the dispatcher's read batcher asks its pool for a size; nothing here touches it
    def get_max_size(self) -> int:
        return 6


def _steps():
    registry = build_registry()
    provide(registry)
    d = Dispatcher(registry, _Pool(), Settings(data_dir=Path(tempfile.gettempdir()), verbs_nonce_secret="ab" * 32))
    cid = uuid.uuid4()
    company = Company(cid, "bench", "Bench", "pro", "optional")
    subject = "http://127.0.0.1:40000/profile/0.json"
    principal = Principal("buyer", cid, BUYER_ROLE, subject, "ucp")
    text = json.dumps(UPDATE)
    args = {
        "method": "PUT",
        "path": "/ucp/v1/checkout-sessions/chk_0123456789abcdef",
        "body_text": text,
        "raw_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "id": "chk_0123456789abcdef",
    }
    call = Call("checkout.update", args, idempotency_key=str(uuid.uuid4()))
    verb = registry.get("checkout.update")
    now = datetime.now(UTC)
    out = Outcome(200, ANSWER)
    plan = getattr(d, "_plan_inputs", None)
    if plan is not None:
        inputs = plan(verb, principal, call, company, now, True)
    else:  # before the split: run the coroutine (it reads nothing for a buyer's checkout verb)
        coro = d._inputs(verb, principal, call, company, now, lazy=True)
        try:
            coro.send(None)
        except StopIteration as stop:
            inputs = stop.value
    decision = decide(verb, principal, call, inputs, registry)
    result = result_of(out, read=False, entity="chk")
    key = call.idempotency_key

    def entry_of():
        e = audit_entry(principal, company, call, verb, decision, "allowed", "completed", now)
        e.update(elapsed_us=1234, entity={"type": "checkout_session", "id": "chk"})
        e.update(
            idempotency_key=key,
            reversible=False,
            rollback_handle=None,
            revert_data=None,
            children=None,
            transaction_id=None,
        )
        return e

    entry = entry_of()
    env = success_envelope(verb, dict(result), 0, key, entry, now)

    def all_steps():
        p = Principal("buyer", cid, BUYER_ROLE, subject, "ucp")
        c = Call("checkout.update", args, idempotency_key=key)
        i = plan(verb, p, c, company, now, True) if plan is not None else inputs
        dec = decide(verb, p, c, i, registry)
        VerbContext(None, dict(args), p, company, now, verb, d, defer_last_write=True)
        r = result_of(out, read=False, entity="chk")
        e = audit_entry(p, company, c, verb, dec, "allowed", "completed", now)
        e.update(elapsed_us=1234, entity={"type": "checkout_session", "id": "chk"})
        e.update(idempotency_key=key, reversible=False, rollback_handle=None, revert_data=None, children=None)
        e.update(transaction_id=None)
        v = success_envelope(verb, r, 0, key, e, now)
        append_args(cid, e)
        db_dumps(v)
        envelope_body(v)

    return [
        ("principal+call", lambda: (Principal("buyer", cid, BUYER_ROLE, subject, "ucp"), Call("v", args))),
        ("inputs", (lambda: plan(verb, principal, call, company, now, True)) if plan else (lambda: None)),
        ("decide", lambda: decide(verb, principal, call, inputs, registry)),
        ("context", lambda: VerbContext(None, dict(args), principal, company, now, verb, d, defer_last_write=True)),
        ("result_of", lambda: result_of(out, read=False, entity="chk")),
        ("entry", entry_of),
        ("success", lambda: success_envelope(verb, dict(result), 0, key, entry, now)),
        ("append_args", lambda: append_args(cid, entry)),
        ("envelope_jsonb", lambda: db_dumps(env)),
        ("envelope_body", lambda: envelope_body(env)),
        ("all", all_steps),
    ]


def _callgrind(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], capture_output=True)
    time.sleep(1)  # callgrind reads the command between basic blocks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--callgrind", action="store_true", help="one callgrind dump per step")
    args = ap.parse_args()
    steps = _steps()
    if args.callgrind:
        _callgrind("-i", "on")
        for name, fn in steps:
            _callgrind("-z")
            for _ in range(args.n):
                fn()
            _callgrind("-d", name)
        _callgrind("-i", "off")
        print(f"{len(steps)} dumps of {args.n} calls each")
        return
    for name, fn in steps:
        best = float("inf")
        for _ in range(args.rounds):
            t0 = time.thread_time()
            for _ in range(args.n):
                fn()
            best = min(best, (time.thread_time() - t0) / args.n * 1e6)
        print(f"{name:16s} {best:8.2f} us")


if __name__ == "__main__":
    main()

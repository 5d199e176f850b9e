"""The one front door: every verb call from every transport goes through :meth:`Dispatcher.dispatch`.

Imperative shell around the pure :func:`decide`: load the facts it needs, call it, then persist
what it returns. Every exit writes exactly one audit row (denials and preflights included) and
returns the envelope of solid-verbs ``schema/envelope.json``::

    {ok: true, verb, result, audit_id, idempotency_key?, rollback_handle?, replayed?}
    {ok: false, verb, error: {reason, message, hint?, path?}, pending?, audit_id}

An allowed call runs in one tenant transaction together with its idempotency claim, nonce
consumption, cap reservation, business writes, events and audit row: all commit or none does.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import asyncpg

from .. import metrics
from ..clock import Clock, SystemClock
from ..company_settings import daily_caps, setting
from ..config import Settings
from ..db import tenant_tx
from ..db.outage import as_outage
from ..tenancy import Company, get_company
from . import approvals, audit, store
from .consent import clean_args
from .context import VerbContext
from .decide import PHRASE_ATTEMPTS, Call, Decision, Inputs, cap_class_for, decide, gates
from .errors import REASONS, RETRY_HINT, VerbError, transient
from .outcome import audit_entry, success_envelope
from .policy import DEFAULT_DAILY_CAPS, Principal, RiskClass
from .reads import ReadBatcher, ReadJob
from .registry import Registry, Verb
from .schemas import shape_validator
from .secret import load_nonce_secrets

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)
# Data errors that come from a stored argument value (encoding, range, length), not from a
# handler bug: answered invalid_arguments. Others (division by zero...) stay execution_failed.
# asyncpg's client-side DataError (an InterfaceError and a ValueError; not asyncpg.DataError, which
# is PostgreSQL's class 22) is only public under asyncpg.exceptions._base
_ENCODE_ERROR = asyncpg.exceptions._base.DataError
_UNSTORABLE = (
    _ENCODE_ERROR,  # asyncpg cannot encode the value for its parameter (an int beyond int8, ...)
    asyncpg.CharacterNotInRepertoireError,
    asyncpg.UntranslatableCharacterError,
    asyncpg.NumericValueOutOfRangeError,
    asyncpg.StringDataRightTruncationError,
)


_READ_OR_NONE = (None, RiskClass.READ)
_NO_CAPS: dict[str, int | None] = {}


def _scope(verb: Verb) -> str:
    """The key space of ``verb``'s idempotency keys (VerbPolicy.idempotency_scope, else its name)."""
    return verb.policy.idempotency_scope or verb.name


class _Replay(Exception):
    def __init__(self, digest: str, envelope: dict[str, Any] | None):
        self.digest, self.envelope = digest, envelope


class Dispatcher:
    """The verb runtime for one process. Stateless apart from the registry: replicas share the DB.

    Args:
        registry: the verbs. pool: the application-role pool. settings: gateway settings
        (nonce secret, TTLs, default caps). clock: injected time (tests freeze it).
    """

    def __init__(self, registry: Registry, pool: asyncpg.Pool, settings: Settings, clock: Clock | None = None):
        self.registry = registry
        self.pool = pool
        self.settings = settings
        self.clock = clock or SystemClock()
        self._kid, self._secrets = load_nonce_secrets(settings)
        v = settings.verbs_validate_output
        self.validate_output = settings.dev_mode if v is None else v
        self._reads = ReadBatcher(pool, self._read_in)

    def approval_url(self, company: Company, approval_id: str) -> str:
        """Absolute URL of an approval page on the company's first host (``public_scheme``)."""
        path = approvals.approval_path(approval_id)
        if not company.hostnames:
            return path
        host = company.hostnames[0]
        return f"{self.settings.public_scheme}://{'[' + host + ']' if ':' in host else host}{path}"

    # ---- facts ---------------------------------------------------------------------------
    def cap_limit(self, company: Company, cap_class: str | None) -> int | None:
        """Today's limit for ``cap_class`` (None: no cap): the company's ``settings.verbs.daily_caps``
        override the gateway defaults.

        Raises: CompanyMisconfigured when ``verbs`` or ``verbs.daily_caps`` is no object or any cap in
        it is no integer >= 0 or null. Fails closed: the operator's intended cap is unknown and the
        gateway default may be higher (or null), so no capped call runs until the row is corrected
        (it is raised before anything is written; uncapped calls go on)."""
        if cap_class is None:
            return None
        caps: dict[str, Any] = {**DEFAULT_DAILY_CAPS, **self.settings.verbs_daily_caps}
        caps.update(setting(company, "verbs.daily_caps", daily_caps, default=_NO_CAPS))
        v = caps.get(cap_class)
        return None if v is None else int(v)

    async def _inputs(
        self, verb: Verb | None, principal: Principal, call: Call, company: Company, now, *, lazy: bool = False
    ) -> Inputs:
        """The facts ``decide`` needs. ``lazy``: when the only stored fact would be the idempotency
        record (no cap, no principal limit), skip its read and return ``Inputs.deferred = True``:
        the execution's atomic key claim then finds a replay or a conflict (see :meth:`dispatch`)."""
        plan = self._plan_inputs(verb, principal, call, company, now, lazy)
        if type(plan) is Inputs:
            return plan
        base, ttl, cap_class, lim = plan
        assert verb is not None
        async with tenant_tx(self.pool, company.id) as conn:
            stored = None
            if call.idempotency_key:
                stored = await store.stored_key(conn, principal.key, _scope(verb), call.idempotency_key, now)
            used = await store.cap_used(conn, cap_class, now.date()) if cap_class else 0
            pused = (0, 0)
            if lim is not None and principal.kind == "buyer":
                pused = await store.principal_used(conn, principal.key, lim.key or verb.name, now.date())
        return Inputs(
            *base,
            nonce_ttl=ttl,
            cap_used=used,
            cap_limit=self.cap_limit(company, cap_class),
            principal_used=pused,
            stored_digest=stored[0] if stored else None,
        )

    def _plan_inputs(self, verb: Verb | None, principal: Principal, call: Call, company: Company, now, lazy: bool):
        """The part of :meth:`_inputs` that reads nothing: the Inputs when no stored fact is needed
        (no coroutine then: :meth:`dispatch` calls this first), else ``(first five Inputs fields,
        nonce ttl, cap class, principal limit)`` for the read."""
        # only a typed-phrase preflight mints a nonce (an empty id makes issue_nonce refuse)
        fresh = secrets.token_hex(8) if verb is not None and verb.may_mint else ""
        base = (company.tier, self._secrets, self._kid, now, fresh)  # Inputs' first five fields
        ttl = self.settings.verbs_nonce_ttl
        if verb is None or not verb.is_write or not (type(call.args) is dict or isinstance(call.args, Mapping)):
            return Inputs(*base, nonce_ttl=ttl)
        cls = verb.policy.risk_class
        if verb.policy.escalate is not None:
            try:
                cls, _ = verb.policy.escalate(clean_args(call.args), self.registry)
            except (VerbError, KeyError, TypeError, ValueError):
                return Inputs(*base, nonce_ttl=ttl)
        cap_class = cap_class_for(verb, principal, cls)
        lim = verb.policy.principal_limit
        if lazy and cap_class is None and (lim is None or principal.kind != "buyer"):
            return Inputs(*base, nonce_ttl=ttl, deferred=True)
        return base, ttl, cap_class, lim

    # ---- the front door --------------------------------------------------------------------
    async def dispatch(self, principal: Principal, call: Call, *, company: Company | None = None) -> dict[str, Any]:
        """Run one verb call end to end and return its envelope (never raises for a denial).

        Args:
            principal: the authenticated caller (company, role, kind, transport).
            call: verb name, args and the control fields (confirm, typed_phrase, nonce, idempotency_key).
            company: the caller's company if the transport already loaded it.
        Returns: the envelope dict (schema/envelope.json).
        Raises: CompanyNotFound when the principal's company does not exist; CompanyMisconfigured
            (nothing written) for a capped call of a company whose ``settings.verbs.daily_caps`` is
            malformed (:meth:`cap_limit`).
        """
        now = self.clock.now()
        # identity first: a transport builds the principal from the company it loaded (UUID's == is Python)
        if company is None or (company.id is not principal.company_id and company.id != principal.company_id):
            company = await get_company(self.pool, str(principal.company_id))
        verb = self.registry.get(call.verb) if isinstance(call.verb, str) else None
        t0 = time.perf_counter()
        inputs = self._plan_inputs(verb, principal, call, company, now, True)
        if type(inputs) is not Inputs:  # a stored fact to read first
            inputs = await self._inputs(verb, principal, call, company, now, lazy=True)
        decision = decide(verb, principal, call, inputs, self.registry)
        if inputs.deferred and decision.outcome != "execute" and call.idempotency_key:
            # a stored receipt would have taken precedence over this refusal: decide on the full facts
            inputs = await self._inputs(verb, principal, call, company, now)
            decision = decide(verb, principal, call, inputs, self.registry)
        outcome = decision.outcome
        metrics.CONSENT.labels(decision.reason or outcome if outcome == "deny" else outcome).inc()
        if outcome in ("deny", "pending"):
            return await self._refuse(principal, company, call, verb, decision, now)
        if outcome == "replay":
            return await self._replay(principal, company, call, verb, decision, now)
        assert verb is not None
        write = decision.risk_class not in _READ_OR_NONE
        key = (call.idempotency_key or secrets.token_hex(8)) if write else None
        try:
            if key is None:
                return await self._reads.submit(ReadJob(principal, company, call, verb, decision, now, t0))
            return await self._execute(principal, company, call, verb, decision, key, now, t0)
        except _Replay as rp:
            if rp.digest != decision.digest:
                metrics.IDEMPOTENCY.labels(principal.transport, "conflict").inc()
                d = Decision(
                    "deny",
                    decision.risk_class,
                    "idempotency_conflict",
                    REASONS["idempotency_conflict"],
                    digest=decision.digest,
                )
                return await self._refuse(principal, company, call, verb, d, now)
            return await self._replay(principal, company, call, verb, decision, now, rp.envelope)
        except VerbError as exc:
            denial = exc.reason in (
                "nonce_used",
                "daily_cap_exceeded",
                "principal_limit_exceeded",
                "role_denied",
            )
            return await self._failed(principal, company, call, verb, decision, exc, now, t0, denial)
        except _UNSTORABLE:  # the arguments hold a value the database cannot store: not retryable
            log.warning("verb %s: arguments rejected by the database", verb.name)
            err = VerbError("invalid_arguments", "an argument holds a value that cannot be stored (range or encoding)")
            return await self._failed(principal, company, call, verb, decision, err, now, t0, False)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            outage = as_outage(exc)
            if outage is not None:  # nothing can be audited either: the transport answers 503
                raise outage from None
            log.exception("verb %s failed in the database", verb.name)
            # details stay in the log; only an outage invites a retry (errors.transient)
            err = VerbError("execution_failed", hint=RETRY_HINT if transient(exc) else None)
            return await self._failed(principal, company, call, verb, decision, err, now, t0, False)
        except Exception:  # the runtime's boundary: log, audit as failed, answer execution_failed
            log.exception("verb %s raised", verb.name)
            err = VerbError("execution_failed")
            return await self._failed(principal, company, call, verb, decision, err, now, t0, False)

    async def _execute(self, principal, company, call, verb: Verb, decision: Decision, key, now, t0) -> dict[str, Any]:
        args = clean_args(call.args)
        # the key's claim goes out with BEGIN: the first statement, before any row lock
        claim = store.claim_sql(principal.key, _scope(verb), key, now) if key is not None else None
        try:
            return await self._execute_in(principal, company, call, verb, decision, key, now, t0, args, claim)
        except asyncpg.PostgresError as exc:
            if claim is None or exc.sqlstate != store.KEY_TAKEN:
                raise
        async with tenant_tx(self.pool, company.id) as conn:  # a live record: replay it or refuse
            got = await store.stored_key(conn, principal.key, _scope(verb), key, now)
        raise _Replay(got[0], got[1]) if got else VerbError("execution_failed", hint=RETRY_HINT)

    async def _execute_in(self, principal, company, call, verb, decision, key, now, t0, args, claim) -> dict[str, Any]:
        async with tenant_tx(self.pool, company.id, then=claim) as conn:  # = reads.tenant_conn(durable=True)
            approval = decision.approval or {}
            if approval.get("nonce_id") and not await store.consume_nonce(conn, company.id, approval["nonce_id"], now):
                raise VerbError("nonce_used", hint="Call again without confirm for a fresh phrase and nonce.")
            if decision.cap_class or (verb.policy.principal_limit is not None and principal.kind == "buyer"):
                await self._count(conn, principal, company, verb, decision.cap_class, args, now)  # else no-op
            ctx = VerbContext(conn, args, principal, company, now, verb, self, defer_last_write=key is not None)
            result = dict(await verb.handler(ctx))
            while True:  # twice when a guarded last write wrote nothing (write_last otherwise=)
                entry = audit_entry(principal, company, call, verb, decision, "allowed", "completed", now)
                entry["elapsed_us"] = int((time.perf_counter() - t0) * 1e6)
                entry["entity"] = ctx.entity
                if key is not None:
                    revert = verb.policy.revert
                    entry["idempotency_key"] = key
                    entry["reversible"] = revert is not None
                    entry["rollback_handle"] = ctx.rollback_handle or (f"{verb.name}:{key}" if revert else None)
                    entry["revert_data"] = ctx.revert_data
                    entry["children"] = ctx.children or None
                    entry["transaction_id"] = ctx.transaction_id
                if key is None:
                    await ctx.flush_last_write()
                    audit_id, _ = await audit.append(conn, company.id, entry)
                    env = success_envelope(verb, result, audit_id, key, entry, now)
                    self._check_output(verb, env["result"])
                    return env
                # audit row and stored envelope in one last statement: the chain head is locked only
                # from there to COMMIT (it serialises the company's writes)
                env = success_envelope(verb, result, 0, key, entry, now)
                # result.audit_id is this row's, except a revert's that names the reverted action
                patch = verb.shape != "revert" or "audit_id" not in result
                got = await store.append_and_finish_key(
                    conn,
                    company.id,
                    entry,
                    principal=principal.key,
                    verb=_scope(verb),
                    key=key,
                    digest=decision.digest,
                    now=now,
                    ttl_seconds=self.settings.verbs_idempotency_ttl,
                    envelope=env,
                    result_audit_id=patch,
                    write=ctx.last_write,  # the handler's last write, in this same statement
                    guarded=ctx.otherwise is not None,
                )
                if got is not None:
                    break
                # nothing of it was written: the handler's answer for that case, closed the same way
                otherwise, ctx.last_write, ctx.otherwise = ctx.otherwise, None, None
                assert otherwise is not None
                result = dict(await otherwise())
            audit_id = got[0]
            env["audit_id"] = audit_id
            if patch:
                env["result"]["audit_id"] = audit_id
            if self.validate_output:
                self._check_output(verb, env["result"])
        return env

    async def _count(self, conn, principal, company, verb: Verb, cap_class, args, now) -> None:
        limit = self.cap_limit(company, cap_class)
        if (
            cap_class
            and limit is not None
            and not await store.reserve_cap(conn, company.id, cap_class, now.date(), limit)
        ):
            raise VerbError(
                "daily_cap_exceeded",
                f"Daily {cap_class} cap of {limit} reached.",
                hint="Caps reset at 00:00 UTC.",
            )
        lim = verb.policy.principal_limit
        if lim is not None and principal.kind == "buyer":
            amount = int(args.get(lim.amount_arg, 0)) if lim.amount_arg else 0
            ok = await store.count_principal(
                conn,
                company.id,
                principal.key,
                lim.key or verb.name,
                now.date(),
                amount,
                lim.calls,
                lim.amount,
            )
            if not ok:
                raise VerbError("principal_limit_exceeded")

    async def _read_in(self, conn: asyncpg.Connection, job: ReadJob) -> tuple[dict[str, Any], dict[str, Any]]:
        """One READ job inside a group transaction: handler and output check. Returns the envelope
        (without its audit_id) and the audit entry the batcher appends. Domain errors become a
        ``failed`` entry; database errors propagate (the batcher then retries the job alone)."""
        p, company, verb = job.principal, job.company, job.verb
        ctx = VerbContext(conn, clean_args(job.call.args), p, company, job.now, verb, self)
        try:
            try:
                result = dict(await verb.handler(ctx))
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, VerbError):
                raise
            except Exception:  # the runtime's boundary for a handler bug: audit it as failed
                log.exception("verb %s raised", verb.name)
                raise VerbError("execution_failed") from None
            env = success_envelope(verb, result, 0, None, {}, job.now)
            self._check_output(verb, env["result"])
        except VerbError as exc:
            d = Decision("execute", job.decision.risk_class, exc.reason, exc.message, digest=job.decision.digest)
            entry = audit_entry(p, company, job.call, verb, d, "failed", "failed", job.now)
            entry["elapsed_us"] = int((time.perf_counter() - job.t0) * 1e6)
            out: dict[str, Any] = {"ok": False, "verb": verb.name, "error": exc.error_body()}
            if exc.result is not None:
                out["result"] = exc.result
            return out, entry
        entry = audit_entry(p, company, job.call, verb, job.decision, "allowed", "completed", job.now)
        entry.update(elapsed_us=int((time.perf_counter() - job.t0) * 1e6), entity=ctx.entity)
        env.pop("audit_id", None)
        return env, entry

    def _check_output(self, verb: Verb, result: dict[str, Any]) -> None:
        """Raise VerbError(execution_failed) when output checks are on and ``result`` breaks the shape."""
        err = next(iter(shape_validator(verb.shape).iter_errors(result)), None) if self.validate_output else None
        if err is not None:
            log.error("verb %s output breaks shape %s: %s", verb.name, verb.shape, err.message)
            raise VerbError("execution_failed", f"output does not match the {verb.shape} shape")

    # ---- exits that execute nothing -------------------------------------------------------------
    async def _write(self, company: Company, entry: dict[str, Any]) -> int:
        async with tenant_tx(self.pool, company.id) as conn:
            audit_id, _ = await audit.append(conn, company.id, entry)
        return audit_id

    async def _refuse(self, principal, company, call, verb, decision: Decision, now) -> dict[str, Any]:
        pending = decision.outcome == "pending"
        entry = audit_entry(
            principal,
            company,
            call,
            verb,
            decision,
            "pending" if pending else "denied",
            "pending" if pending else "denied",
            now,
        )
        if pending and decision.pending:
            entry["requires_approval"] = True
        error = decision.error()
        pending_out = decision.pending
        if decision.pending and decision.pending.get("confirm") == "human" and verb is not None:
            # a human-only verb: the pending approval a person confirms, with the audit row
            async with tenant_tx(self.pool, company.id) as conn:
                aid, expires = await approvals.create_approval(
                    conn,
                    company.id,
                    verb=verb.name,
                    args=clean_args(call.args),
                    digest=decision.digest,
                    risk_class=decision.risk_class.name if decision.risk_class is not None else "",
                    phrase=decision.pending.get("required_phrase", ""),
                    requested_by=principal.key,
                    requested_via=principal.transport,
                    now=now,
                    ttl=self.settings.verbs_approval_ttl,
                )
                entry["approval_id"] = aid
                audit_id, _ = await audit.append(conn, company.id, entry)
            pending_out = {
                **decision.pending,
                "approval_id": aid,
                "approval_url": self.approval_url(company, aid),
                "expires_at": expires.isoformat().replace("+00:00", "Z"),
            }
        elif decision.nonce_id is None:
            audit_id = await self._write(company, entry)
        else:  # a wrong typed phrase: counted against its nonce with the denial row, in one transaction
            expires = now + timedelta(seconds=self.settings.verbs_nonce_ttl)
            async with tenant_tx(self.pool, company.id) as conn:
                left = await store.phrase_mismatch(conn, company.id, decision.nonce_id, now, expires, PHRASE_ATTEMPTS)
                entry["attempts_left"] = left
                audit_id, _ = await audit.append(conn, company.id, entry)
            error.hint = (
                f"{error.hint} ({left} attempt{'s' if left != 1 else ''} left with this nonce)"
                if left
                else "No attempts left with this nonce: call again without confirm for a fresh phrase and nonce."
            )
        env: dict[str, Any] = {
            "ok": False,
            "verb": entry["verb"],
            "audit_id": audit_id,
            "error": error.error_body(),
        }
        if pending_out:
            env["pending"] = pending_out
        return env

    async def _replay(self, principal, company, call, verb, decision, now, envelope=None) -> dict[str, Any]:
        metrics.IDEMPOTENCY.labels(principal.transport, "replayed").inc()
        if envelope is None:
            async with tenant_tx(self.pool, company.id) as conn:
                got = await store.stored_key(conn, principal.key, _scope(verb), call.idempotency_key, now)
            envelope = got[1] if got else None
        if envelope is None:  # expired between the two reads: treat as unknown rather than re-running
            d = Decision(
                "deny", decision.risk_class, "execution_failed", "retry the call", RETRY_HINT, digest=decision.digest
            )
            return await self._refuse(principal, company, call, verb, d, now)
        entry = audit_entry(principal, company, call, verb, decision, "replayed", "completed", now)
        entry.update(idempotency_key=call.idempotency_key, replay_of=envelope.get("audit_id"))
        await self._write(company, entry)
        return {**envelope, "replayed": True}

    async def _failed(
        self, principal, company, call, verb, decision, exc: VerbError, now, t0, denial
    ) -> dict[str, Any]:
        d = Decision(
            decision.outcome,
            decision.risk_class,
            exc.reason,
            exc.message,
            digest=decision.digest,
            approval=decision.approval,
        )
        entry = audit_entry(
            principal,
            company,
            call,
            verb,
            d,
            "denied" if denial else "failed",
            "denied" if denial else "failed",
            now,
        )
        entry["elapsed_us"] = int((time.perf_counter() - t0) * 1e6)
        audit_id = await self._write(company, entry)
        env: dict[str, Any] = {
            "ok": False,
            "verb": verb.name,
            "audit_id": audit_id,
            "error": exc.error_body(),
        }
        if exc.result is not None:
            env["result"] = exc.result
        return env

    # ---- child verbs (transaction / macro steps) ----------------------------------------------
    async def run_child(self, parent: VerbContext, name: str, raw_args: Mapping[str, Any]) -> dict[str, Any]:
        """Run one step inside the parent's transaction: gates, cap, handler, audit row.

        Consent is the parent's (its class is the highest of its steps). Raises VerbError.
        """
        verb = self.registry.get(name)
        gate = gates(verb, parent.principal, name, raw_args, parent.company.tier, self.registry)
        if isinstance(gate, Decision):
            raise gate.error()
        assert verb is not None
        cls, _, digest, args = gate
        if cls is RiskClass.IRREVERSIBLE or verb.shape in ("transaction", "macro", "revert"):
            raise VerbError("step_class_not_allowed", f"{name} cannot be a step")
        conn, now, t0 = parent.conn, parent.now, time.perf_counter()
        cap = cap_class_for(verb, parent.principal, cls)
        await self._count(conn, parent.principal, parent.company, verb, cap, args, now)
        ctx = VerbContext(
            conn,
            args,
            parent.principal,
            parent.company,
            now,
            verb,
            self,
            transaction_id=parent.transaction_id,
        )
        result = dict(await verb.handler(ctx))
        decision = Decision("execute", cls, digest=digest, approval={"via": parent.verb.name})
        entry = audit_entry(
            parent.principal,
            parent.company,
            Call(name, raw_args),
            verb,
            decision,
            "allowed",
            "completed",
            now,
        )
        write = cls is not RiskClass.READ
        entry.update(
            elapsed_us=int((time.perf_counter() - t0) * 1e6),
            entity=ctx.entity,
            transaction_id=parent.transaction_id,
            reversible=write and verb.policy.revert is not None,
            rollback_handle=ctx.rollback_handle,
            revert_data=ctx.revert_data,
        )
        audit_id, _ = await audit.append(conn, parent.company.id, entry)
        parent.children.append(audit_id)
        receipt = {"verb": name, "status": "completed", "audit_id": audit_id}
        if ctx.rollback_handle:
            receipt["rollback_handle"] = ctx.rollback_handle
        return {**receipt, "result": result}

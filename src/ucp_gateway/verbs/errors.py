"""Verb-runtime errors and the machine-readable reasons of the envelope.

::

    GatewayError
     +-- RegistrationError (verb_registration_invalid; startup/programming error)
     +-- VerbError          a denial or failure that becomes ``{ok:false, error:{reason,...}}``
     +-- NonceSecretError   (config: nonce secret missing in production)

Every ``reason`` the dispatcher can answer is listed in :data:`REASONS` (digest §3.2, §8).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, GatewayError

__all__ = ["REASONS", "RETRY_HINT", "NonceSecretError", "RegistrationError", "VerbError", "transient"]

# The hint of an ``execution_failed`` that a retry may cure (the database did not answer, a lock or
# serialization conflict, a record that expired between two reads). Every other execution_failed is
# an internal fault (a handler bug, a constraint the handler broke): retrying it fails again, so the
# UCP bindings answer it 500 internal_error, never 503 with Retry-After (commerce.verbs.envelope_error).
RETRY_HINT = "Retry the call: the failure was transient."

REASONS: dict[str, str] = {
    "unknown_verb": "No such verb for this caller.",
    "blocked_verb": "This verb is permanently blocked.",
    "surface_not_allowed": "This verb is not offered on this transport.",
    "reserved_arg": "company_id and user_id come from the session, never from arguments.",
    "invalid_arguments": "The arguments do not match the verb's input_schema.",
    "tier_denied": "The company's subscription tier is below the verb's tier floor.",
    "role_denied": "The caller's role is below the verb's role floor.",
    "daily_cap_exceeded": "The company's daily cap for this risk class is used up (resets 00:00 UTC).",
    "principal_limit_exceeded": "This caller's own daily limit is used up.",
    "dispatch_pending": "Consent is needed before this verb runs; nothing was executed.",
    "consent_channel_required": "A person must confirm this on the approval page; the caller cannot confirm it.",
    "phrase_mismatch": "The typed phrase differs from the required phrase.",
    "nonce_invalid": "The consent nonce is malformed, tampered, or bound to another call.",
    "nonce_expired": "The consent nonce is older than 5 minutes.",
    "nonce_used": "The consent nonce was already used.",
    "idempotency_conflict": "This idempotency key was used with other arguments.",
    "execution_failed": "The verb failed; nothing was changed.",
    "no_revert_handler": "This action has no revert handler; manual intervention required.",
    "already_reverted": "This action was already reverted.",
    "not_revertible": "Only completed writes can be reverted.",
    "audit_not_found": "No audit row with that id.",
    "step_class_not_allowed": "This verb cannot be a transaction or macro step.",
    "not_found": "The entity does not exist.",
    "invalid_state": "The entity's state does not allow this action.",
}


# SQLSTATE classes a retry of the same call cannot cure (PostgreSQL Appendix A): data exceptions
# (22: a division by zero, a value out of range), integrity violations (23) and syntax or undefined
# objects (42: a statement the handler got wrong), except 42501 (insufficient privilege: the store
# refusing writes, which UCP answers 503 like any storage failure).
_BUG_SQLSTATE = ("22", "23", "42")


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` (raised while a verb ran) is a storage failure a retry may cure: the connection
    or the server went away (OSError, TimeoutError, asyncpg's InterfaceError), or a PostgreSQL error
    outside :data:`_BUG_SQLSTATE`. False for anything else (an internal fault: a handler bug)."""
    import asyncpg

    if isinstance(exc, asyncpg.InterfaceError) and isinstance(exc, ValueError):
        return False  # asyncpg's client-side DataError: an argument it cannot encode
    if isinstance(exc, (OSError, TimeoutError, asyncpg.InterfaceError)):
        return True
    if not isinstance(exc, asyncpg.PostgresError):
        return False
    state = str(getattr(exc, "sqlstate", "") or "")
    return state == "42501" or not state.startswith(_BUG_SQLSTATE)


class RegistrationError(GatewayError):
    """A VerbRecord or policy that the registry refuses (solid-verbs spec/manifest.md)."""

    code = "verb_registration_invalid"
    http_status = 500


class NonceSecretError(ConfigError):
    code = "verb_nonce_secret_missing"


class VerbError(GatewayError):
    """A denial or a failure, rendered as the error envelope.

    Args:
        reason: machine code (see REASONS; handlers may add domain codes like ``order_not_found``).
        message: for humans and LLMs (never secrets).
        hint: the next actionable step.
        path: JSON path of the offending argument (``invalid_arguments``).
        result: an optional shape-valid result to return with the error (e.g. revert ``reverted:false``).
    """

    code = "verb_error"
    http_status = 200

    def __init__(
        self,
        reason: str,
        message: str = "",
        *,
        hint: str | None = None,
        path: str | None = None,
        result: dict[str, Any] | None = None,
    ):
        super().__init__(message or REASONS.get(reason, reason))
        self.reason = reason
        self.hint = hint
        self.path = path
        self.result = result

    def error_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"reason": self.reason, "message": self.message}
        if self.hint:
            body["hint"] = self.hint
        if self.path:
            body["path"] = self.path
        return body

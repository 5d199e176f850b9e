"""Typed-phrase consent: canonical argument digests and the HMAC-SHA256 nonce (pure; no I/O).

solid-verbs spec/consent.md: the preflight returns the exact phrase and a nonce that binds it; the
confirm echoes ``{confirm: true, typed_phrase, nonce}``; tampering between preflight and confirm is
cryptographically rejected; nonces expire after 5 minutes. Format (digest §8 G2)::

    v1.<kid>.<issued_at unix s>.<nonce_id 16 hex>.<base64url(HMAC-SHA256(secret[kid], binding))>

where ``binding`` is the canonical JSON (sorted keys, ``(",", ":")``, UTF-8) of ``{v, verb,
args_digest, company_id, principal, phrase_digest, issued_at, nonce_id}``. Single use is enforced
by the shell in PostgreSQL (table ``verb_nonces``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

try:  # the fast writer of canonical JSON for plain values; the json module stays the reference
    import orjson
except ImportError:  # pragma: no cover - a dependency
    orjson = None

__all__ = [
    "NONCE_SKEW_SECONDS",
    "NONCE_TTL_SECONDS",
    "NonceCheck",
    "args_digest",
    "canonical_bytes",
    "canonical_json",
    "clean_args",
    "issue_nonce",
    "key_id",
    "verify_nonce",
]

NONCE_TTL_SECONDS = 300
NONCE_SKEW_SECONDS = 5
_NONCE = re.compile(r"^v1\.([0-9a-f]{8})\.(\d{1,12})\.([0-9a-f]{16})\.([A-Za-z0-9_-]{43})$")


def _reference(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_SCALARS = frozenset({str, int, bool, type(None)})
_ORJSON_OPTS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    if orjson is not None
    else 0
)


def _plain(value: Any) -> bool:
    """True when ``value`` holds only exact str / int / bool / None / dict / list / tuple: the values
    whose canonical JSON orjson writes byte for byte as the json module does (no float: the two
    spell some floats differently; no UUID, enum or dataclass: only orjson writes those). False
    too past ``budget`` containers (a cyclic value: the json module then reports it)."""
    stack = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    budget = 10_000
    while stack:
        budget -= 1
        if budget < 0:
            return False
        v = pop()
        t = type(v)
        if t in _SCALARS:
            continue
        if t is dict:
            for x in v.values():
                if type(x) not in _SCALARS:
                    push(x)
        elif t is list or t is tuple:
            extend(v)
        else:
            return False
    return True


def _unsupported(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def canonical_bytes(value: Any) -> bytes:
    """UTF-8 bytes of :func:`canonical_json` (what digests and the audit chain hash).

    orjson writes them for plain values (:func:`_plain`; non-str keys, ints beyond 64 bits and lone
    surrogates make it refuse); everything else goes to the json module, whose results and errors
    (TypeError, ValueError for NaN/Infinity, UnicodeEncodeError) are the reference.
    """
    if orjson is not None and _plain(value):
        try:
            return orjson.dumps(value, default=_unsupported, option=_ORJSON_OPTS)
        except TypeError:  # JSONEncodeError: non-str key, big int, lone surrogate
            pass
    return _reference(value).encode()


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces, non-ASCII kept (UTF-8 when encoded).

    The text of ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False)``, written by orjson for plain values (see :func:`canonical_bytes`).
    Raises: TypeError (not JSON), ValueError (NaN, Infinity) as the json module does.
    """
    if orjson is not None and _plain(value):
        try:
            return orjson.dumps(value, default=_unsupported, option=_ORJSON_OPTS).decode()
        except TypeError:
            pass
    return _reference(value)


def clean_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments without control keys (``_confirmed`` and any other ``_``-prefixed key; G9).
    Always a new dict."""
    for k in args:  # usually nothing to drop: then a plain copy
        if type(k) is not str or k[:1] == "_":
            return {k: v for k, v in args.items() if not k.startswith("_")}
    return dict(args)


def args_digest(args: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of the cleaned arguments."""
    return hashlib.sha256(canonical_bytes(clean_args(args))).hexdigest()


def key_id(secret: bytes) -> str:
    """8-hex id of a secret (first bytes of its SHA-256): selects the key, reveals nothing useful."""
    return hashlib.sha256(b"ucpgw-nonce-kid:" + secret).hexdigest()[:8]


def _mac(secret: bytes, binding: Mapping[str, Any]) -> str:
    raw = hmac.new(secret, canonical_bytes(binding), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _binding(verb: str, digest: str, company_id: str, principal: str, phrase: str, issued_at: int, nonce_id: str):
    return {
        "v": 1,
        "verb": verb,
        "args_digest": digest,
        "company_id": company_id,
        "principal": principal,
        "phrase_digest": hashlib.sha256(phrase.encode()).hexdigest(),
        "issued_at": issued_at,
        "nonce_id": nonce_id,
    }


def issue_nonce(
    secret: bytes,
    *,
    verb: str,
    digest: str,
    company_id: str,
    principal: str,
    phrase: str,
    issued_at: int,
    nonce_id: str,
) -> str:
    """Mint a nonce binding verb, arguments digest, company, principal and phrase at ``issued_at``.

    Args:
        secret: the current server secret (bytes). ``nonce_id``: 16 random hex chars (caller draws them).
        issued_at: UTC seconds.
    Returns: the nonce string (format in the module docstring).
    """
    if not re.fullmatch(r"[0-9a-f]{16}", nonce_id):
        raise ValueError("nonce_id must be 16 lower-case hex characters")
    mac = _mac(secret, _binding(verb, digest, company_id, principal, phrase, issued_at, nonce_id))
    return f"v1.{key_id(secret)}.{issued_at}.{nonce_id}.{mac}"


@dataclass(frozen=True, slots=True)
class NonceCheck:
    """Outcome of :func:`verify_nonce`: ``reason`` None when valid, else nonce_invalid/nonce_expired."""

    reason: str | None
    nonce_id: str | None = None
    issued_at: int | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def verify_nonce(
    token: str,
    secrets: Mapping[str, bytes],
    *,
    verb: str,
    digest: str,
    company_id: str,
    principal: str,
    phrase: str,
    now: int,
    ttl: int = NONCE_TTL_SECONDS,
) -> NonceCheck:
    """Check a nonce against the call being confirmed (not its single use: the shell does that).

    The MAC is recomputed from the *current* call, so other arguments, another verb, company or
    principal, or another phrase give ``nonce_invalid``; a valid nonce older than ``ttl`` seconds
    gives ``nonce_expired``. Comparison is constant-time.
    Args: ``secrets`` maps key id -> secret (current and previous). ``now``: UTC seconds.
    """
    m = _NONCE.match(token or "")
    if not m:
        return NonceCheck("nonce_invalid")
    kid, issued_s, nonce_id, mac = m.groups()
    secret = secrets.get(kid)
    if secret is None:
        return NonceCheck("nonce_invalid")
    issued = int(issued_s)
    want = _mac(secret, _binding(verb, digest, company_id, principal, phrase, issued, nonce_id))
    if not hmac.compare_digest(want, mac):
        return NonceCheck("nonce_invalid")
    age = now - issued
    if age < -NONCE_SKEW_SECONDS:
        return NonceCheck("nonce_invalid")
    if age > ttl:
        return NonceCheck("nonce_expired", nonce_id, issued)
    return NonceCheck(None, nonce_id, issued)

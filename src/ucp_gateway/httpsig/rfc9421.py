"""RFC 9421 pieces around the ``http-message-signatures`` 3.0.0 engine.

The library builds signature bases and runs ECDSA; this module supplies what it lacks for a
multi-tenant gateway: message views built from raw wire data, the algorithm chosen from the key
(never from the request, RFC 9421 §3.2 step 6, §7.3.6), an ES384 option, a clock we pass in
(the library reads ``datetime.now()`` itself), and a parser for ``Signature-Input``/``Signature``.
No I/O here.
"""

from __future__ import annotations

import binascii
import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import http_sf
from cryptography.exceptions import InvalidSignature
from http_message_signatures import HTTPMessageSignaturesException, HTTPMessageVerifier, algorithms
from http_sf.compat import Dictionary, InnerList
from multidict import CIMultiDict

from .base import fast_base_for_ids
from .errors import SignatureInvalid
from .jwkalg import (  # re-exported: this module is where callers have always found them
    ALGORITHMS_BY_CURVE,
    algorithm_for_jwk,
    algorithm_instance,
    ecdsa_verify,
    key_verify,
    looks_der_encoded,
    public_key_from_jwk,
)

__all__ = [
    "ALGORITHMS_BY_CURVE",
    "ParsedSignature",
    "RequestView",
    "ResponseView",
    "algorithm_for_jwk",
    "algorithm_instance",
    "ecdsa_verify",
    "key_verify",
    "looks_der_encoded",
    "parse_signatures",
    "public_key_from_jwk",
    "verify_signature",
]


@dataclass(slots=True)
class RequestView:
    """What the library needs from a request (RFC 9421 §2.2 derived components come from ``url``).

    Attributes:
        method: uppercase method as received.
        url: trusted external origin + raw request-target (``https://shop.example/p?q``), never
            the yarl-normalised URL (pitfalls 4-6).
        headers: every field line in wire order (a dict would fold duplicates, pitfall 8).
        body: content bytes as transferred (before any decoding, RFC 9530 §2).
        request_target: the raw HTTP/1.1 request-target, for ``@request-target``.
    """

    method: str
    url: str
    headers: CIMultiDict[str]
    body: bytes = b""
    request_target: str | None = None


@dataclass(slots=True)
class ResponseView:
    """A response for signing: ``status_code``, ``headers`` and the triggering ``request`` (``;req``)."""

    status_code: int
    headers: CIMultiDict[str]
    request: RequestView | None = None
    body: bytes = b""


@dataclass(slots=True)
class ParsedSignature:
    """One member of ``Signature-Input`` with its ``Signature`` bytes (RFC 9421 §4.1, §4.2).

    Treat as read-only. Not declared frozen: one is built per request on the hot path, and a
    frozen dataclass's ``__init__`` costs several times more (``params`` is a dict in any case).
    """

    label: str
    components: tuple[str, ...]  # serialized component identifiers in received order
    params: dict[str, Any] = field(default_factory=dict)
    signature: bytes = b""
    members: list | None = field(default=None, compare=False, repr=False)  # http_sf items, if parsed so
    source: str = field(default="", compare=False, repr=False)  # the whole Signature-Input value
    # the received Inner List + parameters when byte-identical to their strict serialization
    # (the @signature-params value, RFC 9421 §2.3) with only registered parameters of the right type
    params_text: str | None = field(default=None, compare=False, repr=False)

    @property
    def raw_components(self) -> list[tuple[Any, dict]]:
        """The components as ``http_sf`` items ``(name, params)``; derived from ``components``
        when the fast reader parsed them (it only accepts bare names)."""
        if self.members is not None:
            return self.members
        return [(c[1:-1], {}) for c in self.components]

    @property
    def node(self) -> InnerList:
        """The member as the library's compat Inner List (parsed on demand, for the library path)."""
        return _parse_dict(self.source, "Signature-Input")[self.label]

    @property
    def signature_params(self) -> str:
        """The Inner List re-serialized strictly, as it appears in ``@signature-params``."""
        return str(self.node)

    @property
    def keyid(self) -> str | None:
        v = self.params.get("keyid")
        return v if isinstance(v, str) else None


def _parse_dict(value: str, name: str) -> Dictionary:
    try:
        return HTTPMessageVerifier._parse_signature_dictionary(value)
    except Exception as exc:  # http_sf raises assorted ValueErrors on bad syntax
        raise SignatureInvalid(f"malformed {name} field") from exc


def _reject_duplicate(key: str, context: str) -> None:
    if context == "dictionary":
        raise ValueError(f"duplicate label {key!r}")


def _sf_dict(value: str, name: str) -> dict:
    try:
        return http_sf.parse(value.encode("latin-1"), tltype="dictionary", on_duplicate_key=_reject_duplicate)
    except Exception as exc:  # http_sf raises assorted ValueErrors on bad syntax
        raise SignatureInvalid(f"malformed {name} field") from exc


_SIG_MEMBER = re.compile(r"([a-z*][a-z0-9_.*-]*)=:([A-Za-z0-9+/]*={0,2}):")
_SIG_FIELD = re.compile(rf"{_SIG_MEMBER.pattern}(?:[ \t]*,[ \t]*{_SIG_MEMBER.pattern})*")


def _signature_dict(value: str) -> dict:
    """The Signature Dictionary (label -> byte sequence). Plain ``label=:base64:`` members are read
    with a regex (http_sf's byte-sequence parser is slow in pure Python); anything else goes
    through http_sf."""
    v = value.strip(" ")
    m = _SIG_MEMBER.fullmatch(v)
    if m is not None:  # the usual single member
        return {m.group(1): (_b64_strict(m.group(2)), {})}
    if _SIG_FIELD.fullmatch(v):
        out: dict = {}
        for label, b64 in _SIG_MEMBER.findall(v):
            if label in out:
                raise SignatureInvalid("malformed Signature field")
            out[label] = (_b64_strict(b64), {})
        return out
    return _sf_dict(value, "Signature")


def _b64_strict(b64: str) -> bytes:
    try:
        return binascii.a2b_base64(b64, strict_mode=True)  # = base64.b64decode(validate=True)
    except ValueError:  # binascii.Error, or a non-ASCII value (never a 500)
        raise SignatureInvalid("malformed Signature field") from None


_SI_COMP = r'"[a-z0-9@!#$%&\'*+.^_`|~-]+"'
_SI_PARAM = r';[a-z*][a-z0-9_.*-]*=(?:-?[0-9]{1,15}|"[\x20\x21\x23-\x5b\x5d-\x7e]*")'
_SI_MEMBER = re.compile(rf"([a-z*][a-z0-9_.*-]*)=\(((?:{_SI_COMP}(?: +{_SI_COMP})*)?)\)((?:{_SI_PARAM})*)")
_SI_FIELD = re.compile(rf"{_SI_MEMBER.pattern}(?:[ \t]*,[ \t]*{_SI_MEMBER.pattern})*")
_SI_PARAM_ITEM = re.compile(r';([a-z*][a-z0-9_.*-]*)=(?:(-?[0-9]{1,15})|"([\x20\x21\x23-\x5b\x5d-\x7e]*)")')


def _signature_input_dict(value: str) -> dict:
    """Signature-Input as ``{label: ([(component, {}), ...], params)}`` like ``http_sf.parse``.

    The usual shape (bare component strings; integer or plain-string parameters) is read with a
    regex; anything else (component parameters, escapes, tokens, booleans) goes through http_sf.
    tests/httpsig/test_base.py checks both readers agree.
    """
    v = value.strip(" ")
    m = _SI_MEMBER.fullmatch(v)
    if m is not None:  # the usual single member
        members = [m.groups()]
    elif _SI_FIELD.fullmatch(v):
        members = _SI_MEMBER.findall(v)
    else:
        return _sf_dict(value, "Signature-Input")
    out: dict = {}
    for label, comps, raw_params in members:
        params: dict = {}
        if raw_params:
            items = _SI_PARAM_ITEM.findall(raw_params)
            for key, num, text in items:
                params[key] = int(num) if num else text
            if len(params) != len(items):
                return _sf_dict(value, "Signature-Input")  # http_sf's rule for repeats applies
        if label in out:
            raise SignatureInvalid("malformed Signature-Input field")
        out[label] = ([(c[1:-1], {}) for c in comps.split(" ") if c], params)
    return out


def _component_id(name: Any, params: dict) -> str:
    if not params and type(name) is str and '"' not in name and "\\" not in name:
        return f'"{name}"'
    return http_sf.ser((name, params))


def parse_signatures(signature_input: str, signature: str) -> list[ParsedSignature]:
    """Parse both Dictionaries; the label sets must be equal and unique (RFC 9421 §4).
    Raises SignatureInvalid."""
    one = _single_signature(signature_input, signature)
    return [one] if one is not None else _parse_signatures_sf(signature_input, signature)


# One member: ``label=(inner)`` (the head: no ")" inside, so it ends at the first one) then plain
# parameters. The head is the same on every request of one signer and request shape, so its
# reading is kept (a pure function of the text); the parameters change per request.
_SI_HEAD = re.compile(r'([a-z*][a-z0-9_.*-]*)=\(("[a-z0-9@!#$%&\'*+.^_`|~ "-]*")?\)')
# Parameters as strict serialization writes them: registered names with their types, integers
# without leading zeros or "-0" (a subset of _SI_PARAMS).
_SI_CANONICAL = re.compile(
    r'(?:;(?:created|expires)=(?:0|-?[1-9][0-9]{0,14})|;(?:keyid|nonce|tag|alg)="[\x20\x21\x23-\x5b\x5d-\x7e]*")*'
)
_SI_PARAMS = re.compile(r'(?:;[a-z*][a-z0-9_.*-]*=(?:-?[0-9]{1,15}|"[\x20\x21\x23-\x5b\x5d-\x7e]*"))*')


@lru_cache(maxsize=256)
def _si_head(head: str) -> tuple[str, str, tuple[str, ...], str] | None:
    """``label=("c1" "c2" ...)`` (single spaces, bare component names) as ``(label, "label=:",
    component ids, "(inner)")``; None for any other shape."""
    m = _SI_HEAD.fullmatch(head)
    if m is None:
        return None
    label, inner = m.groups()
    if inner is None:
        return label, label + "=:", (), "()"
    # '"a" "b"': the names hold neither quotes nor spaces once the '" "' separators go
    names = inner[1:-1].replace('" "', "")
    if len(inner) < 2 or '"' in names or " " in names:
        return None
    return label, label + "=:", tuple(inner.split(" ")), f"({inner})"


def _single_signature(signature_input: str, signature: str) -> ParsedSignature | None:
    """The usual request: one ``label=("c1" "c2" ...);k=1;k2="s"`` member (single spaces, bare
    component names, integer or plain-string parameters) and one ``label=:base64:`` member with the
    same label. None for any other shape (the general reader decides, including which error to
    raise). tests/httpsig/test_base.py checks both readers agree."""
    si = signature_input.strip(" ")
    end = si.find(")") + 1
    head = _si_head(si[:end]) if end else None
    if head is None:
        return None
    label, prefix, ids, inner = head
    ptxt = si[end:]
    sg = signature.strip(" ")
    if not sg.startswith(prefix) or len(sg) < len(prefix) + 1 or sg[-1] != ":":
        return None
    params: dict[str, Any] = {}
    canonical = True  # the received text is what serializing ``params`` gives
    if ptxt:
        canonical = _SI_CANONICAL.fullmatch(ptxt) is not None
        if not canonical and _SI_PARAMS.fullmatch(ptxt) is None:
            return None
        items = _SI_PARAM_ITEM.findall(ptxt)
        for key, num, text in items:
            params[key] = int(num) if num else text
        if len(params) != len(items):
            return None  # a repeated parameter: http_sf's rule applies
    try:  # strict: base64 alphabet and padding only (= base64.b64decode(validate=True))
        sig = binascii.a2b_base64(sg[len(prefix) : -1], strict_mode=True)
    except ValueError:  # binascii.Error, or a non-ASCII value: the general reader refuses it
        return None
    return ParsedSignature(label, ids, params, sig, None, signature_input, inner + ptxt if canonical else None)


def _parse_signatures_sf(signature_input: str, signature: str) -> list[ParsedSignature]:
    inputs = _signature_input_dict(signature_input)
    sigs = _signature_dict(signature)
    if not inputs or inputs.keys() != sigs.keys():
        raise SignatureInvalid("Signature-Input and Signature labels differ")
    out = []
    for label, (members, params) in inputs.items():
        sig = sigs[label][0]
        if not isinstance(members, list) or not isinstance(sig, bytes):
            raise SignatureInvalid(f"malformed signature {label!r}")
        try:
            comps = tuple(_component_id(n, p) for n, p in members)
        except ValueError:
            raise SignatureInvalid(f"malformed signature {label!r}") from None
        out.append(ParsedSignature(label, comps, params, sig, members, signature_input))
    return out


class _GatewayVerifier(HTTPMessageVerifier):
    """The library verifier minus its own clock: freshness is checked by :mod:`.policy` with an
    injected ``now`` before this runs (the library would call ``datetime.now()``)."""

    require_created = False

    def validate_created_and_expires(self, sig_input, max_age=None):
        return None


#: Signature parameters RFC 9421 §6.3 registers; anything else is refused (§2.3).
SIGNATURE_PARAMETERS = frozenset({"alg", "created", "expires", "keyid", "nonce", "tag"})


def verify_signature(message: Any, sig: ParsedSignature, algorithm: Any) -> None:
    """Rebuild the signature base of ``sig`` from ``message`` (RFC 9421 §3.2 step 7) and verify
    it with ``algorithm`` (a library algorithm instance bound to the public key, step 8).

    Freshness, coverage and key choice are the caller's policy, checked before. The base comes
    from :func:`.base.fast_base_for_ids` when it applies, else from the library; the library's
    ECDSA classes are run through :func:`.jwkalg.ecdsa_verify` (the same steps, fewer calls) and
    Ed25519 through the library (:func:`.jwkalg.key_verify`). Raises
    SignatureInvalid for any failure (unknown parameter, §2.5 base error, wrong length, bad
    signature).
    """
    if not SIGNATURE_PARAMETERS.issuperset(sig.params):
        unknown = set(sig.params) - SIGNATURE_PARAMETERS
        raise SignatureInvalid("unknown signature parameter " + ", ".join(sorted(unknown)))
    try:
        if sig.params_text is None:  # else every parameter is registered and of its type already
            HTTPMessageVerifier._validate_signature_param_types(sig.params)
        base = fast_base_for_ids(
            message, sig.components, sig.params, sig.params_text, is_request=type(message) is RequestView
        ) or signature_base(message, sig)
        key_verify(algorithm, sig.signature, base)
    except (HTTPMessageSignaturesException, InvalidSignature, ValueError, TypeError, AssertionError) as exc:
        raise SignatureInvalid("request signature verification failed") from exc


# The library's base builder (RFC 9421 §2.5), used directly: its verify() would parse the signature
# fields a second time and read the wall clock.
_BASE_BUILDER = _GatewayVerifier(signature_algorithm=algorithms.ECDSA_P256_SHA256, key_resolver=None)


def epoch(ts: int) -> dt.datetime:
    """UNIX seconds -> aware UTC datetime."""
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def header_lines(headers: Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    """Field lines (name, value) in wire order into a CIMultiDict (keeps duplicates and order)."""
    return CIMultiDict(headers)


__all__ += ["epoch", "header_lines"]


def signature_base(message: Any, sig: ParsedSignature) -> bytes:
    """The exact RFC 9421 §2.5 signature base of ``sig`` over ``message`` (no trailing newline),
    rebuilt from the received Inner List. Raises HTTPMessageSignaturesException on any §2.5 error."""
    base, _node, _elements = _BASE_BUILDER._build_signature_base(
        message, covered_component_ids=list(sig.node), signature_params=sig.node.params
    )
    return base.encode("ascii")


__all__ += ["signature_base"]

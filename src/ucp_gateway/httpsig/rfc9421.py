"""RFC 9421 pieces around the ``http-message-signatures`` 3.0.0 engine.

The library builds signature bases and runs ECDSA; this module supplies what it lacks for a
multi-tenant gateway: message views built from raw wire data, the algorithm chosen from the key
(never from the request, RFC 9421 §3.2 step 6, §7.3.6), an ES384 option, a clock we pass in
(the library reads ``datetime.now()`` itself), and a parser for ``Signature-Input``/``Signature``.
No I/O here.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from http_message_signatures import HTTPMessageVerifier, algorithms
from http_sf.compat import Dictionary, InnerList, Item
from multidict import CIMultiDict

from .errors import AlgorithmUnsupported, SignatureInvalid

__all__ = [
    "ALGORITHMS_BY_CURVE",
    "ParsedSignature",
    "RequestView",
    "ResponseView",
    "algorithm_for_jwk",
    "looks_der_encoded",
    "make_verifier",
    "parse_signatures",
    "public_key_from_jwk",
    "single_signature_view",
]

#: (kty, crv) -> (library algorithm class, coordinate size in bytes). ES256 is required by UCP,
#: ES384 optional (UCP signatures.md "Algorithms"). Nothing else is ever accepted.
ALGORITHMS_BY_CURVE: dict[tuple[str, str], tuple[type, int]] = {
    ("EC", "P-256"): (algorithms.ECDSA_P256_SHA256, 32),
    ("EC", "P-384"): (algorithms.ECDSA_P384_SHA384, 48),
}
_CURVES = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1}


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


@dataclass(frozen=True, slots=True)
class ParsedSignature:
    """One member of ``Signature-Input`` with its ``Signature`` bytes (RFC 9421 §4.1, §4.2)."""

    label: str
    components: tuple[str, ...]  # serialized component identifiers in received order
    params: dict[str, Any] = field(default_factory=dict)
    signature: bytes = b""
    signature_params: str = ""  # the exact Inner List serialization used in @signature-params

    @property
    def keyid(self) -> str | None:
        v = self.params.get("keyid")
        return v if isinstance(v, str) else None


def _parse_dict(value: str, name: str) -> Dictionary:
    try:
        return HTTPMessageVerifier._parse_signature_dictionary(value)
    except Exception as exc:  # http_sf raises assorted ValueErrors on bad syntax
        raise SignatureInvalid(f"malformed {name} field") from exc


def parse_signatures(signature_input: str, signature: str) -> list[ParsedSignature]:
    """Parse both Dictionaries; the label sets must be equal (RFC 9421 §4). Raises SignatureInvalid."""
    inputs = _parse_dict(signature_input, "Signature-Input")
    sigs = _parse_dict(signature, "Signature")
    if not inputs or inputs.keys() != sigs.keys():
        raise SignatureInvalid("Signature-Input and Signature labels differ")
    out = []
    for label, node in inputs.items():
        sig = sigs[label]
        if not isinstance(node, InnerList) or not isinstance(sig, Item) or not isinstance(sig.value, bytes):
            raise SignatureInvalid(f"malformed signature {label!r}")
        out.append(
            ParsedSignature(
                label=label,
                components=tuple(str(c) for c in node),
                params=dict(node.params),
                signature=sig.value,
                signature_params=str(node),
            )
        )
    return out


def single_signature_view(view: RequestView, chosen: ParsedSignature) -> RequestView:
    """A copy of ``view`` whose signature fields hold only ``chosen``.

    The library validates every member it sees; an attacker-added malformed member must not break
    verification of ours (RFC 9421 §7.2.6), so it never sees the others.
    """
    headers: CIMultiDict[str] = CIMultiDict(
        (k, v) for k, v in view.headers.items() if k.lower() not in ("signature-input", "signature")
    )
    headers["Signature-Input"] = f"{chosen.label}={chosen.signature_params}"
    headers["Signature"] = f"{chosen.label}=:{base64.b64encode(chosen.signature).decode('ascii')}:"
    return RequestView(view.method, view.url, headers, view.body, view.request_target)


def _b64url(s: Any, size: int) -> int:
    if not isinstance(s, str):
        raise AlgorithmUnsupported("JWK coordinate must be a base64url string")
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != size:
        raise AlgorithmUnsupported("JWK coordinate has the wrong length")
    return int.from_bytes(raw, "big")


def algorithm_for_jwk(jwk: dict[str, Any]) -> tuple[type, int]:
    """The signature algorithm fixed by a public JWK's ``kty``/``crv``. Raises AlgorithmUnsupported."""
    alg = ALGORITHMS_BY_CURVE.get((str(jwk.get("kty")), str(jwk.get("crv"))))
    if alg is None:
        raise AlgorithmUnsupported("the signing key's algorithm is not supported (use ES256)")
    return alg


@lru_cache(maxsize=4096)
def _public_key(crv: str, x: str, y: str, size: int) -> ec.EllipticCurvePublicKey:
    nums = ec.EllipticCurvePublicNumbers(_b64url(x, size), _b64url(y, size), _CURVES[crv]())
    try:
        return nums.public_key()  # checks the point is on the curve
    except ValueError as exc:
        raise AlgorithmUnsupported("JWK is not a valid point on its curve") from exc


def public_key_from_jwk(jwk: dict[str, Any]) -> ec.EllipticCurvePublicKey:
    """A cryptography public key from an EC JWK (RFC 7518 §6.2), cached by its coordinates.

    Raises AlgorithmUnsupported for another kty/crv, wrong coordinate sizes or an off-curve point.
    """
    _alg, size = algorithm_for_jwk(jwk)
    return _public_key(str(jwk["crv"]), jwk.get("x"), jwk.get("y"), size)


def looks_der_encoded(sig: bytes) -> bool:
    """True if ``sig`` parses as an ASN.1 DER ECDSA signature (pitfall 1: DER instead of r||s)."""
    if len(sig) < 8 or sig[0] != 0x30 or sig[1] != len(sig) - 2:
        return False
    try:
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        decode_dss_signature(sig)
        return True
    except ValueError:
        return False


class _GatewayVerifier(HTTPMessageVerifier):
    """The library verifier minus its own clock: freshness is checked by :mod:`.policy` with an
    injected ``now`` before this runs (the library would call ``datetime.now()``)."""

    require_created = False

    def validate_created_and_expires(self, sig_input, max_age=None):
        return None


def make_verifier(alg_cls: type, kid: str, public_key: Any) -> HTTPMessageVerifier:
    """A verifier bound to one algorithm and one key (RFC 9421 §3.2 steps 5-6)."""
    from http_message_signatures import MappingKeyResolver

    return _GatewayVerifier(
        signature_algorithm=alg_cls,
        key_resolver=MappingKeyResolver(public_keys={kid: public_key}, private_keys={}),
    )


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
    parsed = HTTPMessageVerifier._parse_signature_dictionary(f"x={sig.signature_params}")["x"]
    handler = _GatewayVerifier(signature_algorithm=algorithms.ECDSA_P256_SHA256, key_resolver=None)
    base, _node, _elements = handler._build_signature_base(
        message, covered_component_ids=list(parsed), signature_params=parsed.params
    )
    return base.encode("ascii")


__all__ += ["signature_base"]

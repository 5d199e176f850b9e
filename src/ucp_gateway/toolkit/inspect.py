"""What a partner's verifier needs to see: every signature of one HTTP message checked step by step.

:func:`inspect_message` is the one report behind ``ucp-gateway verify`` for responses, webhooks and
plain RFC 9421 messages; UCP requests go through :func:`ucp_gateway.httpsig.debug.debug_signature`,
the admin debug endpoint's own view. Both reports have the same keys: ``content_digest``
(received, computed per algorithm, match), ``signatures[]`` (label, components, params,
``missing_components``, ``signature_base``, ``key``, ``looks_der_encoded``, the failing step)
and ``verdict`` (``{"ok": true, "label", "kid"}`` or ``{"ok": false, "code", "content"}`` with
the UCP error code: ``signature_missing``, ``signature_invalid``, ``key_not_found``,
``digest_mismatch``, ``algorithm_unsupported``).

Pure: keys come in as JWKs, the time as ``now`` (UTC). RFC 9421 §3.2 (verifying), RFC 9530 §2
(Content-Digest), UCP signatures.md (required components, algorithms from the key).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ..errors import GatewayError
from ..httpsig.debug import describe_signature
from ..httpsig.errors import KeyNotFound, SignatureInvalid, SignatureMissing
from ..httpsig.jwkalg import algorithm_instance
from ..httpsig.policy import SignaturePolicy, check_freshness, missing_components
from ..httpsig.rfc9421 import RequestView, ResponseView, parse_signatures, verify_signature
from ..httpsig.rfc9530 import ALGORITHMS, check_content_digest, compare_content_digest, content_digest
from ..httpsig.signing import WEBHOOK_COMPONENTS

__all__ = ["inspect_message", "required_for"]


def required_for(view: RequestView | ResponseView) -> list[str]:
    """The components UCP requires of a response's signature (``@status``, plus the digest and
    type of a body: signatures.md "Response covered components") or of a webhook request's
    (:data:`..httpsig.signing.WEBHOOK_COMPONENTS`)."""
    if isinstance(view, ResponseView):
        return ["@status", "content-digest", "content-type"] if view.body else ["@status"]
    return list(WEBHOOK_COMPONENTS)


def _digest_report(view: Any) -> dict[str, Any]:
    cd = view.headers.get("Content-Digest")
    rep: dict[str, Any] = {"received": cd, "computed": {a: content_digest(view.body, a) for a in ALGORITHMS}}
    if cd is not None:
        try:
            rep["match"] = compare_content_digest(cd, view.body).ok
        except GatewayError as exc:
            rep["error"] = exc.message
    return rep


def _check_one(
    view: Any, sig: Any, jwks: Mapping[str, dict], required: list[str] | None, policy: SignaturePolicy | None,
    now: dt.datetime, entry: dict[str, Any],
) -> None:  # fmt: skip
    """Fill ``entry`` for one signature; raise the first failing step's GatewayError."""
    jwk = jwks.get(sig.keyid or "")
    entry["key"] = {"kid": sig.keyid, "found": jwk is not None, "jwk": jwk}
    if jwk is None:
        raise KeyNotFound("signature key not found among the given keys")
    if policy is not None:
        check_freshness(sig.params, now, policy)
    if required is not None:
        missing = missing_components(sig.components, required)
        entry["missing_components"] = missing
        if missing:
            raise SignatureInvalid("signature does not cover required components: " + " ".join(missing))
    if view.body or "content-digest" in {c.strip('"') for c in sig.components}:
        check_content_digest(view.headers.get("Content-Digest"), view.body)
    verify_signature(view, sig, algorithm_instance(jwk))


def inspect_message(
    view: RequestView | ResponseView,
    jwks: Mapping[str, dict],
    *,
    now: dt.datetime,
    required: list[str] | None = None,
    policy: SignaturePolicy | None = None,
) -> dict[str, Any]:
    """Check every signature of ``view`` against ``jwks`` (kid -> public JWK).

    ``required``: component names each signature must cover (None: no coverage gate, plain RFC
    9421). ``policy``: freshness limits for ``created``/``expires`` (None: not checked, as for
    captured test vectors). The verdict is ok when one signature passes every step (RFC 9421
    §7.2.6: any other signature is ignored); otherwise it carries the first signature's failure.
    """
    rep: dict[str, Any] = {"now": int(now.timestamp()), "content_digest": _digest_report(view)}
    rep["kind"] = "response" if isinstance(view, ResponseView) else "request"
    if required is not None:
        rep["required_components"] = required
    si, sg = view.headers.getall("Signature-Input", None), view.headers.getall("Signature", None)
    rep["signatures"] = []
    if si is None or sg is None:
        exc: GatewayError = (
            SignatureMissing("the message is not signed")
            if si is sg
            else SignatureInvalid("Signature and Signature-Input must both be present")
        )
        rep["verdict"] = {"ok": False, "code": exc.code, "content": exc.message}
        return rep
    try:
        sigs = parse_signatures(", ".join(si), ", ".join(sg))
    except GatewayError as exc:
        rep["verdict"] = {"ok": False, "code": exc.code, "content": exc.message}
        return rep
    first: GatewayError | None = None
    ok: dict[str, Any] | None = None
    for sig in sigs:
        entry = describe_signature(view, sig, now)
        try:
            _check_one(view, sig, jwks, required, policy, now, entry)
            entry["valid"] = True
            ok = ok or {"ok": True, "label": sig.label, "kid": sig.keyid}
        except GatewayError as exc:
            entry["valid"] = False
            entry["error"] = {"code": exc.code, "content": exc.message}
            first = first or exc
        rep["signatures"].append(entry)
    if ok is not None:
        rep["verdict"] = ok
    else:
        assert first is not None
        rep["verdict"] = {"ok": False, "code": first.code, "content": first.message}
    return rep

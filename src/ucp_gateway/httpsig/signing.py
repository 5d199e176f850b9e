"""Signing our messages: responses (RFC 9421 §2.4) and outbound webhook requests.

Pure functions over message views and a key; the aiohttp glue is in :mod:`.aiohttp`. ``alg`` is
not written into ``Signature-Input`` (UCP signatures.md: the algorithm comes from the key).
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any, Protocol
from urllib.parse import urlsplit

import http_sf
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from http_message_signatures import (
    HTTPMessageSignaturesException,
    HTTPMessageSigner,
    MappingKeyResolver,
    algorithms,
)
from multidict import CIMultiDict

from .base import fast_base_for_ids, fast_response_base, valid_label
from .rfc9421 import RequestView, ResponseView
from .rfc9530 import content_digest

__all__ = [
    "WEBHOOK_COMPONENTS",
    "KeyForSigning",
    "chosen_components",
    "parse_accept_signature",
    "response_components",
    "sign_response_view",
    "webhook_signature_headers",
]

WEBHOOK_COMPONENTS = (
    "@method",
    "@authority",
    "@path",
    "content-digest",
    "content-type",
    "ucp-agent",
    "webhook-id",
    "webhook-timestamp",
)


_ES256 = ec.ECDSA(hashes.SHA256())
_PARAMS_LINE = '"@signature-params": '


class KeyForSigning(Protocol):
    kid: str
    private_key: ec.EllipticCurvePrivateKey


def _signer(key: KeyForSigning) -> HTTPMessageSigner:
    return HTTPMessageSigner(
        signature_algorithm=algorithms.ECDSA_P256_SHA256,
        key_resolver=MappingKeyResolver(public_keys={}, private_keys={key.kid: key.private_key}),
    )


# Request fields a response signature binds when the request carries them (UCP signatures.md: the
# UCP headers of the request; RFC 9421 §2.4 ";req").
_BOUND_REQUEST_FIELDS = ("ucp-agent", "idempotency-key", "content-digest")
# What Accept-Signature may add to our own coverage (RFC 9421 §5.2 lets the signer refuse the rest):
# response fields we set ourselves and request components. Never fewer than response_components.
_ACCEPTABLE = frozenset(
    [
        '"@status"',
        '"content-digest"',
        '"content-type"',
        *(f'"{n}";req' for n in ("@method", "@authority", "@path", "@query", "@target-uri", "@scheme")),
        *(f'"{n}";req' for n in (*_BOUND_REQUEST_FIELDS, "content-type", "request-id")),
    ]
)


def response_components(has_body: bool, request: RequestView | None) -> list[str]:
    """``@status`` (+ ``content-digest content-type`` with a body) and the request binding
    ``"@method";req "@authority";req "@path";req`` (+ ``"@query";req`` when the URL has a query, and
    ``"ucp-agent";req "idempotency-key";req "content-digest";req`` for those the request carries).
    UCP signatures.md "Response covered components"; RFC 9421 §2.4, §7.3.7. This is the floor of
    every response signature: Accept-Signature can add to it, never take from it."""
    comps = ["@status"]
    if has_body:
        comps += ["content-digest", "content-type"]
    if request is not None:
        comps += ['"@method";req', '"@authority";req', '"@path";req']
        if urlsplit(request.url).query:
            comps.append('"@query";req')
        comps += [f'"{name}";req' for name in _BOUND_REQUEST_FIELDS if name in request.headers]
    return comps


def _quoted(cid: str) -> str:
    return cid if cid.startswith('"') else f'"{cid}"'


def chosen_components(asked: list[str], default: list[str]) -> list[str] | None:
    """The Accept-Signature component list (serialized ids, RFC 9421 §5.1) when we are willing to
    sign it as asked: every id of ``default`` present, every id among the acceptable ones, no repeat.
    None otherwise (the caller then signs ``default``): an empty list, ``@status`` alone or a field
    we did not choose never gets a signature of the company key."""
    if len(set(asked)) != len(asked) or not set(asked) <= _ACCEPTABLE:
        return None
    if not {_quoted(c) for c in default} <= set(asked):
        return None
    return asked


def parse_accept_signature(value: str) -> tuple[str, list[str], dict[str, Any]] | None:
    """First member of an ``Accept-Signature`` Dictionary (RFC 9421 §5.1): label, serialized
    component ids, requested parameters. None if malformed."""
    try:
        parsed = http_sf.parse(value.encode("latin-1"), tltype="dictionary")
    except Exception:
        return None
    for label, (member, params) in parsed.items():
        if not isinstance(member, list):
            return None
        comps = []
        for name, cparams in member:
            if not isinstance(name, str):
                return None
            comps.append(http_sf.ser((name, cparams)))
        return label, comps, dict(params)
    return None


def _es256(key: KeyForSigning, label: str) -> bool:
    """Whether the fast paths may sign with ``key`` under ``label`` (P-256; a valid SF key)."""
    pk = key.private_key
    return valid_label(label) and isinstance(pk, ec.EllipticCurvePrivateKey) and isinstance(pk.curve, ec.SECP256R1)


def _write_signature(headers: CIMultiDict[str], key: KeyForSigning, label: str, base: bytes, sig_params: str) -> None:
    """Sign ``base`` (ES256, RFC 9421 §3.3.4 r||s) and set Signature-Input/Signature as the library
    does: one line each, replacing any earlier ones."""
    raw = algorithms.ECDSA_P256_SHA256.signature_from_der(key.private_key.sign(base, _ES256))
    headers["Signature-Input"] = f"{label}={sig_params}"
    headers["Signature"] = f"{label}=:{base64.b64encode(raw).decode('ascii')}:"


def _fast_sign(view: ResponseView, key: KeyForSigning, label: str, comps: list[str], params: dict[str, Any]) -> bool:
    """Sign ``view`` without the library when :func:`.base.fast_response_base` covers the shape
    (same base bytes, same header values; tests/httpsig/test_signing_fast.py). False: not done."""
    built = fast_response_base(view, tuple(comps), params) if _es256(key, label) else None
    if built is None:
        return False
    _write_signature(view.headers, key, label, *built)
    return True


def _sign(view: ResponseView, key: KeyForSigning, kwargs: dict[str, Any]) -> None:
    """One response signature: the fast path, else the library (which may raise)."""
    params: dict[str, Any] = {"created": int(kwargs["created"].timestamp()), "keyid": key.kid}
    if kwargs.get("expires") is not None:
        params["expires"] = int(kwargs["expires"].timestamp())
    for name in ("nonce", "tag"):
        if kwargs.get(name) is not None:
            params[name] = kwargs[name]
    # a Content-Digest we did not compute (no body) is left to the library, which checks its format
    ours = bool(view.body) or "Content-Digest" not in view.headers
    if ours and _fast_sign(view, key, kwargs["label"], kwargs["covered_component_ids"], params):
        return
    _signer(key).sign(view, key_id=key.kid, include_alg=False, **kwargs)


def sign_response_view(
    view: ResponseView,
    key: KeyForSigning,
    *,
    now: dt.datetime,
    accept_signature: str | None = None,
    label: str = "sig1",
    tag: str | None = None,
) -> None:
    """Sign ``view`` in place: sets Content-Digest (over ``view.body``, the exact bytes sent),
    Signature-Input and Signature. :func:`response_components` are always covered; Accept-Signature
    (§5.2) may choose the label, a component list that contains them (:func:`chosen_components`)
    and ask for ``expires``; anything else it asks is ignored.

    The usual shapes are signed through :func:`.base.fast_response_base` (the library's bytes,
    without its Structured Field round trips); anything else through ``HTTPMessageSigner``.
    Raises HTTPMessageSignaturesException only on programming errors."""
    if view.body:
        view.headers["Content-Digest"] = content_digest(view.body)
    default = response_components(bool(view.body), view.request)
    kwargs: dict[str, Any] = {
        "created": now,
        "tag": tag,
        "label": label,
        "covered_component_ids": default,
        "use_existing_digest": "Content-Digest" in view.headers,  # ours, over exactly view.body
    }
    asked = parse_accept_signature(accept_signature) if accept_signature else None
    if asked is not None:
        # RFC 9421 §5.2 lets the signer decline: we honour the label, the component list only when
        # it contains our own coverage (chosen_components), and ``expires`` with a value of ours.
        # ``nonce``, ``tag``, ``keyid`` and ``alg`` are never taken from the caller, so the company
        # key signs no base of the caller's making (one that could pass as a webhook, for one).
        a_label, a_comps, a_params = asked
        if valid_label(a_label):
            kwargs["label"] = a_label
        comps = chosen_components(a_comps, default)
        if comps is not None:
            kwargs["covered_component_ids"] = comps
        if "expires" in a_params:
            kwargs["expires"] = now + dt.timedelta(minutes=5)
    try:
        _sign(view, key, kwargs)
    except HTTPMessageSignaturesException:
        if kwargs["covered_component_ids"] is default:
            raise
        # components we cannot provide (a request field absent): fall back to our own coverage
        kwargs["covered_component_ids"] = default
        _sign(view, key, kwargs)


def webhook_signature_headers(
    key: KeyForSigning,
    *,
    url: str,
    body: bytes,
    ucp_agent: str,
    webhook_id: str,
    webhook_timestamp: str,
    now: dt.datetime,
    content_type: str = "application/json",
    method: str = "POST",
) -> dict[str, str]:
    """Headers for an outbound signed webhook (UCP order webhooks; signatures.md).

    Covers ``@method @authority @path content-digest content-type ucp-agent webhook-id
    webhook-timestamp`` (+ ``@query`` when the URL has one). Send ``body`` exactly as given.
    """
    headers: CIMultiDict[str] = CIMultiDict()
    headers["Content-Type"] = content_type
    headers["Content-Digest"] = content_digest(body)
    headers["UCP-Agent"] = ucp_agent
    headers["Webhook-Id"] = webhook_id
    headers["Webhook-Timestamp"] = webhook_timestamp
    comps = list(WEBHOOK_COMPONENTS)
    if urlsplit(url).query:
        comps.insert(3, "@query")
    view = RequestView(method.upper(), url, headers, body)
    ids = tuple(f'"{c}"' for c in comps)
    base = fast_base_for_ids(view, ids, {"created": int(now.timestamp()), "keyid": key.kid})
    if base is not None and _es256(key, "sig1"):  # the library's bytes (tests/httpsig/test_signing_fast.py)
        _write_signature(headers, key, "sig1", base, base.rsplit(b"\n", 1)[1].decode()[len(_PARAMS_LINE) :])
        return dict(headers.items())
    _signer(key).sign(
        view,
        key_id=key.kid,
        created=now,
        label="sig1",
        include_alg=False,
        covered_component_ids=comps,
        use_existing_digest=True,
    )
    return dict(headers.items())

"""A fast path for the RFC 9421 §2.5 signature base of the common UCP request signature.

``fast_signature_base`` handles signatures whose components carry no parameters and are
``@method @authority @path @query @target-uri @scheme`` or lower-case field names, with
``created/expires`` integers and ``keyid/nonce/tag/alg`` strings. URLs are split by
:func:`url_parts` (a plain-character regex, else the library's strict parser) and field lines are
normalised like the library does; anything else returns None, in which case the library's own
base builder is used. Why: the library's builder re-serialises every identifier through
``http_sf`` and costs several times the ECDSA verify itself (bench/verify.py). Tests check that
both builders, and both URL splitters, give identical results (tests/httpsig/test_base.py).

``fast_response_base`` does the same for the responses we sign (RFC 9421 §2.4): ``@status``,
response fields and ``;req`` request components (UCP signatures.md, "Response covered
components"); the library stays the reference (tests/httpsig/test_signing_fast.py, bench/sign.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from http_message_signatures import HTTPMessageSignaturesException
from http_message_signatures._url import parse_url
from http_message_signatures.structures import normalize_header_value

__all__ = ["fast_base_for_ids", "fast_signature_base", "url_parts"]

_FIELD = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")
_INT_PARAMS = frozenset({"created", "expires"})
_STR_PARAMS = frozenset({"keyid", "nonce", "tag", "alg"})
_DEFAULT_PORTS = {"http": "80", "https": "443"}
# The everyday URL: http(s), a reg-name host, optional port, path and query of RFC 3986 characters
# (percent escapes checked by _BAD_PCT). A subset of the library's grammar with the same split.
_PCHARS = r"A-Za-z0-9._~!$&'()*+,;=:@%-"
_URL_PLAIN = re.compile(rf"(https?)://([A-Za-z0-9.-]+)(?::([0-9]*))?(/[{_PCHARS}/]*)?(?:\?([{_PCHARS}/?]*))?")
_BAD_PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_NO_URL: Mapping[str, str | None] = MappingProxyType({})


def url_parts(url: str) -> tuple[str, str, str | None, str, str | None] | None:
    """``(scheme, host, port, path, query)`` as the library's ``parse_url`` spells them (absent
    path ``""``, absent port/query None), or None where that parser raises."""
    m = _URL_PLAIN.fullmatch(url)
    if m is not None and ("%" not in url or _BAD_PCT.search(url) is None):
        scheme, host, port, path, query = m.groups()
        return scheme, host, port, path or "", query
    try:
        u = parse_url(url)
    except HTTPMessageSignaturesException:
        return None
    return u.scheme, u.host, u.port, u.path, u.query


def _params_suffix(params: dict[str, Any]) -> str | None:
    out = []
    for k, v in params.items():
        if k in _INT_PARAMS and type(v) is int and -(10**15) < v < 10**15:
            out.append(f";{k}={v}")
        elif k in _STR_PARAMS and type(v) is str and v.isascii() and v.isprintable() and '"' not in v and "\\" not in v:
            out.append(f';{k}="{v}"')
        else:
            return None
    return "".join(out)


@lru_cache(maxsize=1024)
def _url_components(url: str, method: str) -> Mapping[str, str | None] | None:
    """Values of the URL-derived components (RFC 9421 §2.2.2-2.2.7) of ``url``, or None when
    :func:`url_parts` refuses it. ``@target-uri`` is None for OPTIONS (the library refuses it).
    Kept per (url, method), read-only: a pure function of them, and a resource's URL recurs
    (every create on one path, every call of one checkout session)."""
    parts = url_parts(url)
    if parts is None:
        return None
    scheme_raw, host, port, path, query = parts
    scheme = scheme_raw.lower()
    authority = host.lower()
    if port and port.lstrip("0") != _DEFAULT_PORTS.get(scheme):
        authority += ":" + port
    path = path or "/"
    hostport = host if port is None else f"{host}:{port}"
    target = None if method == "OPTIONS" else f"{scheme_raw}://{hostport}{path}{'' if query is None else '?' + query}"
    return MappingProxyType({"@authority": authority, "@path": path, "@query": "?" + (query or ""),
                             "@scheme": scheme, "@target-uri": target})  # fmt: skip


def fast_signature_base(message: Any, components: list[tuple[str, dict]], params: dict[str, Any]) -> bytes | None:
    """The signature base for a request ``message`` (``method``, ``url``, ``headers``), or None
    when the fast path does not apply. ``components``/``params`` are as parsed by ``http_sf``."""
    ids = []
    for name, cparams in components:
        if cparams or type(name) is not str:
            return None
        ids.append(f'"{name}"')
    return fast_base_for_ids(message, tuple(ids), params)


def fast_base_for_ids(
    message: Any,
    component_ids: tuple[str, ...],
    params: dict[str, Any],
    params_text: str | None = None,
    *,
    is_request: bool = False,
) -> bytes | None:
    """:func:`fast_signature_base` with the components as serialized identifiers
    (:attr:`.rfc9421.ParsedSignature.components`, e.g. ``('"@method"', '"content-digest"')``).

    ``params_text``: the received ``@signature-params`` value (Inner List and parameters), given
    only when it is byte-identical to the strict serialization of ``component_ids`` + ``params``
    (:attr:`.rfc9421.ParsedSignature.params_text` guarantees that); it then ends the base as is
    (RFC 9421 §2.3: the value is the serialization of the received member).
    ``is_request``: the caller knows ``message`` is a request (has no ``status_code``).
    """
    plan = _plan(component_ids)
    method = getattr(message, "method", None)
    if plan is None or not isinstance(method, str) or method != method.upper():
        return None
    steps, inner, uses_url, template = plan
    if params_text is None:
        suffix = _params_suffix(params)
        if suffix is None:
            return None
        params_text = inner + suffix
    if not is_request and hasattr(message, "status_code"):
        return None
    derived: Mapping[str, str | None] = _NO_URL
    if uses_url:
        derived = _url_components(message.url, method)
        if derived is None:
            return None
    getall = message.headers.getall
    values: list[str] = []
    append = values.append
    for kind, name in steps:
        if kind is None:  # a field
            field_lines = getall(name, None)
            if field_lines is None:
                return None
            value = field_lines[0]
            if len(field_lines) == 1 and "\r\n" not in value:
                append(value.strip(" \t"))  # what normalize_header_value does without folds
            else:
                append(", ".join(normalize_header_value(v) for v in field_lines))
        elif kind == "@method":
            if "\t" in method or method != method.strip(" "):  # printable is checked below
                return None
            append(method)
        else:  # @authority @path @query @scheme @target-uri
            value = derived[kind]
            if value is None:
                return None
            append(value)
    # every value ASCII, printable or tab (no CR, LF or other controls), checked once for all
    joined = "".join(values)
    if not joined.isascii() or not (joined.isprintable() or joined.replace("\t", " ").isprintable()):
        return None
    append(params_text)
    base = template % tuple(values)
    return base.encode("ascii") if base.isascii() else None


_URL_KINDS = frozenset({"@authority", "@path", "@query", "@scheme", "@target-uri"})
_DERIVED = _URL_KINDS | {"@method"}
_PLAIN_ID = re.compile(r'"([a-z0-9@!#$%&\'*+.^_`|~-]+)"')


@lru_cache(maxsize=512)
def _plan(component_ids: tuple[str, ...]) -> tuple[tuple[tuple[str | None, str], ...], str, bool, str] | None:
    """How to build the base lines for a list of covered components: ``((kind, name), ...)``
    (kind: the derived component's name, None for a field), the ``@signature-params`` Inner List
    without parameters, whether the URL is needed, and the base as a ``%`` template (one ``%s``
    per value, then one for the ``@signature-params`` value); None if a component has
    parameters, repeats, or is not handled here. Depends only on the identifiers
    (the same few lists recur across requests), never on request values."""
    steps: list[tuple[str | None, str]] = []
    names: set[str] = set()
    for cid in component_ids:
        m = _PLAIN_ID.fullmatch(cid)
        if m is None or m.group(1) in names:
            return None
        name = m.group(1)
        if name.startswith("@"):
            if name not in _DERIVED:
                return None
            kind = name
        elif _FIELD.match(name):
            kind = None
        else:
            return None
        names.add(name)
        steps.append((kind, name))
    inner = "(" + " ".join(component_ids) + ")"
    template = "".join(f"{cid.replace('%', '%%')}: %s\n" for cid in component_ids) + '"@signature-params": %s'
    return tuple(steps), inner, bool(names & _URL_KINDS), template


# --- responses (RFC 9421 §2.4): ``@status``, response fields and ``;req`` request components ---------

_RESP_ID = re.compile(r'"([a-z0-9@!#$%&\'*+.^_`|~-]+)"(;req)?')
_BARE_NAME = re.compile(r"[a-z0-9@!#$%&'*+.^_`|~-]+")
_LABEL = re.compile(r"[a-z*][a-z0-9_.*-]*")
_RESP_FIELD = "field"  # a step's kind for a field (derived components: their name)


@lru_cache(maxsize=512)
def _response_plan(component_ids: tuple[str, ...]) -> tuple[tuple[tuple[bool, str, str, str], ...], str, bool] | None:
    """Plan for a response signature's components: ``((from_request, kind, name, line prefix),
    ...)``, the ``@signature-params`` Inner List without parameters, and whether the request URL
    is needed (for any ``;req`` component). Identifiers are bare names (``@status``) or serialized
    items (``"@path";req``), as ``HTTPMessageSigner.sign`` takes them. None for parameters other
    than ``req``, repeats, ``set-cookie`` (the library may add ``bs``), or derived components a
    response cannot have."""
    steps = []
    seen: set[tuple[str, bool]] = set()
    ids = []
    for raw in component_ids:
        cid = raw if raw.startswith('"') else (f'"{raw}"' if _BARE_NAME.fullmatch(raw) else "")
        m = _RESP_ID.fullmatch(cid)
        if m is None:
            return None
        name, req = m.group(1), m.group(2) is not None
        if (name, req) in seen or name == "set-cookie":
            return None
        if name.startswith("@"):
            if (req and name not in _DERIVED) or (not req and name != "@status"):
                return None
            kind = name
        elif _FIELD.match(name):
            kind = _RESP_FIELD
        else:
            return None
        seen.add((name, req))
        ids.append(cid)
        steps.append((req, kind, name, f"{cid}: "))
    # any ;req component makes the library parse the request URL (and refuse one it cannot parse)
    uses_url = any(req for req, _k, _n, _p in steps)
    return tuple(steps), "(" + " ".join(ids) + ")", uses_url


def _field_value(headers: Any, name: str) -> str | None:
    """A field's combined value as the library resolves it, or None (absent, or not ASCII printable)."""
    field_lines = headers.getall(name, None)
    if field_lines is None:
        return None
    if len(field_lines) == 1 and "\r\n" not in field_lines[0]:
        value = field_lines[0].strip(" \t")
    else:
        value = ", ".join(normalize_header_value(v) for v in field_lines)
    if not value.isascii() or not (value.isprintable() or value.replace("\t", " ").isprintable()):
        return None
    return value


def fast_response_base(
    response: Any, component_ids: tuple[str, ...], params: dict[str, Any]
) -> tuple[bytes, str] | None:
    """The signature base of a response signature and its ``@signature-params`` value, or None
    when the fast path does not apply (then the library decides, and may raise).

    ``response`` has ``status_code`` (int), ``headers`` (a multidict) and ``request`` (a
    :class:`.rfc9421.RequestView` or None, for ``;req`` components, RFC 9421 §2.4).
    ``component_ids``: bare names or serialized items as for ``HTTPMessageSigner.sign``;
    ``params``: signature parameters in the order they are written (``created``, ``keyid``, ...).
    """
    plan = _response_plan(component_ids)
    suffix = _params_suffix(params)
    status = getattr(response, "status_code", None)
    if plan is None or suffix is None or type(status) is not int:
        return None
    steps, inner, uses_url = plan
    request = getattr(response, "request", None)
    derived: Mapping[str, str | None] = _NO_URL
    if request is not None:
        method = getattr(request, "method", None)
        if not isinstance(method, str) or method != method.upper():
            return None  # the library refuses such a request even when no ;req component is covered
        if uses_url:
            derived = _url_components(request.url, method)
            if derived is None:
                return None
    out: list[str] = []
    for from_request, kind, name, prefix in steps:
        if from_request and request is None:
            return None
        if kind is _RESP_FIELD:
            value = _field_value(request.headers if from_request else response.headers, name)
            if value is None:
                return None
        elif kind == "@status":
            value = str(status)
        elif kind == "@method":
            value = method
            if not value.isprintable() or value != value.strip(" "):
                return None
        else:  # @authority @path @query @scheme @target-uri
            value = derived[kind]
            if value is None:
                return None
        out.append(f"{prefix}{value}\n")
    sig_params = inner + suffix
    out.append('"@signature-params": ' + sig_params)
    base = "".join(out)
    return (base.encode("ascii"), sig_params) if base.isascii() else None


def valid_label(label: str) -> bool:
    """Whether ``label`` serializes as a Structured Field Dictionary key (RFC 8941 §3.2)."""
    return _LABEL.fullmatch(label) is not None


__all__ += ["fast_response_base", "valid_label"]

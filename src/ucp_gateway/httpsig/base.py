"""A fast path for the RFC 9421 §2.5 signature base of the common UCP request signature.

``fast_signature_base`` handles signatures whose components carry no parameters and are
``@method @authority @path @query @target-uri @scheme`` or lower-case field names, with
``created/expires`` integers and ``keyid/nonce/tag/alg`` strings. It reuses the library's strict
URL parser and field-line normaliser and returns None for anything else, in which case the
library's own base builder is used. Why: the library's builder re-serialises every identifier
through ``http_sf`` and costs several times the ECDSA verify itself (bench/verify.py). Tests
check that both builders give identical bytes (tests/httpsig/test_base.py).
"""

from __future__ import annotations

import re
from typing import Any

from http_message_signatures import HTTPMessageSignaturesException
from http_message_signatures._url import parse_url
from http_message_signatures.structures import normalize_header_value

__all__ = ["fast_signature_base"]

_FIELD = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")
_SF_STRING_OK = re.compile(r"^[\x20-\x21\x23-\x5b\x5d-\x7e]*$")  # printable ASCII minus " and \
_INT_PARAMS = frozenset({"created", "expires"})
_STR_PARAMS = frozenset({"keyid", "nonce", "tag", "alg"})
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _params_suffix(params: dict[str, Any]) -> str | None:
    out = []
    for k, v in params.items():
        if k in _INT_PARAMS and type(v) is int and -(10**15) < v < 10**15:
            out.append(f";{k}={v}")
        elif k in _STR_PARAMS and type(v) is str and _SF_STRING_OK.match(v):
            out.append(f';{k}="{v}"')
        else:
            return None
    return "".join(out)


def fast_signature_base(message: Any, components: list[tuple[str, dict]], params: dict[str, Any]) -> bytes | None:
    """The signature base for a request ``message`` (``method``, ``url``, ``headers``), or None
    when the fast path does not apply. ``components``/``params`` are as parsed by ``http_sf``."""
    suffix = _params_suffix(params)
    method = getattr(message, "method", None)
    if suffix is None or hasattr(message, "status_code") or not isinstance(method, str) or method != method.upper():
        return None
    try:
        url = parse_url(message.url)
    except HTTPMessageSignaturesException:
        return None
    scheme = url.scheme.lower()
    port = url.port
    if port and port.lstrip("0") == _DEFAULT_PORTS.get(scheme):
        port = None
    authority = f"{url.host.lower()}:{port}" if port else url.host.lower()
    path = url.path or "/"
    lines: list[str] = []
    names: list[str] = []
    for name, cparams in components:
        if cparams or type(name) is not str or name in names:
            return None
        if name == "@method":
            value = message.method
        elif name == "@authority":
            value = authority
        elif name == "@path":
            value = path
        elif name == "@query":
            value = "?" + (url.query or "")
        elif name == "@scheme":
            value = scheme
        elif name == "@target-uri":
            if message.method == "OPTIONS":
                return None
            value = f"{url.scheme}://{url.authority}{path}{'' if url.query is None else '?' + url.query}"
        elif _FIELD.match(name):
            field_lines = message.headers.getall(name, None)
            if field_lines is None:
                return None
            value = ", ".join(normalize_header_value(v) for v in field_lines)
            if not value.isascii() or "\r" in value or "\n" in value or not value.replace("\t", " ").isprintable():
                return None
        else:
            return None
        if name.startswith("@") and (not value.isprintable() or value != value.strip(" ")):
            return None
        names.append(name)
        lines.append(f'"{name}": {value}\n')
    inner = "(" + " ".join(f'"{n}"' for n in names) + ")"
    base = "".join(lines) + f'"@signature-params": {inner}{suffix}'
    return base.encode("ascii") if base.isascii() else None

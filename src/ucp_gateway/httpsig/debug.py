"""Signature debugging for admins: explain why a request's signature does (not) verify.

Pure parsing plus one call to the verifier; used by ``POST /admin/v1/signatures/debug``. This is
the only place that returns details; normal error bodies stay minimal (no oracle).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from multidict import CIMultiDict

from ..errors import BadRequest, GatewayError
from .policy import SignaturePolicy, missing_components
from .resolver import KeyResolver
from .rfc9421 import (
    RequestView,
    ResponseView,
    looks_der_encoded,
    parse_signatures,
    signature_base,
)
from .rfc9530 import ALGORITHMS, compare_content_digest, content_digest
from .verify import profile_url_of, request_requirements, verify_request

__all__ = ["debug_signature", "describe_signature", "parse_http_message"]


def parse_http_message(raw: bytes, *, scheme: str = "https", request: RequestView | None = None) -> Any:
    """Parse an HTTP/1.1 message as text (CRLF or LF line ends) into a RequestView, or a
    ResponseView (bound to ``request``) when the start line is a status line. The body is the
    bytes after the blank line, cut to Content-Length when given. Raises BadRequest."""
    norm = raw.replace(b"\r\n", b"\n")
    head, _sep, body = norm.partition(b"\n\n")
    lines = head.decode("latin-1").rstrip("\n").split("\n")
    if not lines or not lines[0].strip():
        raise BadRequest("empty HTTP message")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        if line[:1] in (" ", "\t") and headers:  # obs-fold: join with one space (RFC 9421 §2.1)
            last = list(headers.items())[-1][0]
            vals = headers.getall(last)
            headers.popall(last)
            for v in vals[:-1]:
                headers.add(last, v)
            headers.add(last, vals[-1] + " " + line.strip())
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadRequest(f"malformed header line {line[:40]!r}")
        headers.add(name, value.strip(" \t"))
    if "Content-Length" in headers:
        try:
            body = body[: int(headers["Content-Length"])]
        except ValueError:
            raise BadRequest("bad Content-Length") from None
    start = lines[0].split(" ")
    if start[0].startswith("HTTP/"):
        try:
            status = int(start[1])
        except (IndexError, ValueError):
            raise BadRequest("bad status line") from None
        return ResponseView(status, headers, request, body)
    if len(start) != 3:
        raise BadRequest("bad request line")
    method, target = start[0], start[1]
    if target.startswith(("http://", "https://")):
        url = target
    else:
        url = f"{scheme}://{headers.get('Host', '')}{target}"
    return RequestView(method, url, headers, body, target)


def describe_signature(view: Any, sig: Any, now: dt.datetime) -> dict[str, Any]:
    """What one parsed signature of ``view`` says, as JSON: label, components, params, the
    signature's length, whether it looks DER-encoded (RFC 9421 §3.3.4 wants raw r||s), the clock
    skew of ``created`` (seconds, now minus created) and the exact RFC 9421 §2.5 signature base,
    or the library's reason it cannot be built. Pure; raises nothing."""
    entry: dict[str, Any] = {
        "label": sig.label,
        "components": list(sig.components),
        "params": dict(sig.params),
        "signature_length": len(sig.signature),
        "looks_der_encoded": looks_der_encoded(sig.signature),
    }
    created = sig.params.get("created")
    if isinstance(created, int):
        entry["clock_skew_seconds"] = int(now.timestamp()) - created
    try:
        entry["signature_base"] = signature_base(view, sig).decode("ascii")
    except Exception as exc:  # report the library's reason as text
        entry["signature_base_error"] = str(exc) or exc.__class__.__name__
    return entry


async def debug_signature(
    raw: bytes,
    *,
    resolver: KeyResolver,
    policy: SignaturePolicy,
    now: dt.datetime,
    scheme: str = "https",
    cache_age: Any = None,
) -> dict[str, Any]:
    """A JSON-safe report: parsed Signature-Input, the exact signature base, received vs computed
    Content-Digest, missing required components, the resolved key (kid, source profile, cache
    age), whether the signature looks DER-encoded, clock skew, and the verifier's verdict."""
    view = parse_http_message(raw, scheme=scheme)
    if not isinstance(view, RequestView):
        raise BadRequest("send a request, not a response")
    rep: dict[str, Any] = {"method": view.method, "target_uri": view.url, "now": int(now.timestamp())}
    required = request_requirements(view)
    rep["required_components"] = required
    cd = view.headers.get("Content-Digest")
    rep["content_digest"] = {
        "received": cd,
        "computed": {a: content_digest(view.body, a) for a in ALGORITHMS},
    }
    if cd is not None:
        try:
            chk = compare_content_digest(cd, view.body)
            rep["content_digest"]["match"] = chk.ok
        except GatewayError as exc:
            rep["content_digest"]["error"] = exc.message
    try:
        rep["profile_url"] = profile_url_of(view.headers.get("UCP-Agent"), allow_http=policy.allow_http_profiles)
    except GatewayError as exc:
        rep["profile_url"] = None
        rep["profile_error"] = exc.message
    sigs_out = []
    si, sg = view.headers.get("Signature-Input"), view.headers.get("Signature")
    if si is not None and sg is not None:
        try:
            sigs = parse_signatures(
                ", ".join(view.headers.getall("Signature-Input")), ", ".join(view.headers.getall("Signature"))
            )
        except GatewayError as exc:
            sigs, rep["parse_error"] = [], exc.message
        for s in sigs:
            entry = describe_signature(view, s, now)
            entry["missing_components"] = missing_components(s.components, required)
            if rep.get("profile_url") and s.keyid:
                try:
                    jwk = await resolver.resolve(rep["profile_url"], s.keyid)
                except GatewayError as exc:
                    jwk, entry["key_error"] = None, f"{exc.code}: {exc.message}"
                age = cache_age(rep["profile_url"]) if callable(cache_age) else None
                entry["key"] = {
                    "kid": s.keyid,
                    "found": jwk is not None,
                    "source_profile": rep["profile_url"],
                    "cache_age_seconds": age,
                    "jwk": jwk,
                }
            sigs_out.append(entry)
    rep["signatures"] = sigs_out
    try:
        v = await verify_request(view, resolver, policy, now, None)
        rep["verdict"] = {"ok": True, "label": v.label, "kid": v.kid}
    except GatewayError as exc:
        cause = exc.__cause__
        rep["verdict"] = {
            "ok": False,
            "code": exc.code,
            "status": exc.http_status,
            "content": exc.message,
            "detail": str(cause) if cause else None,
        }
    return rep

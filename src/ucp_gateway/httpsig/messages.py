"""aiohttp messages as RFC 9421 reads them: :func:`request_view` (raw header lines in wire order,
raw path), the dot-segment check of a raw path, :func:`decoded_body` (the signed bytes with their
Content-Encoding undone) and :func:`sign_response` (a buffered response signed with the company's
active key). No request storage of the signature layer (``httpsig.web``) is read or set here.
"""

from __future__ import annotations

import datetime as dt
import re
import zlib
from uuid import UUID

from aiohttp import web
from multidict import CIMultiDict

from ..appkeys import REQ_RAW_BODY
from ..errors import BadRequest
from ..mediatype import DECODED_CODINGS
from .rfc9421 import RequestView, ResponseView
from .signing import sign_response_view

__all__ = ["canonical_path", "decoded_body", "request_view", "sign_response"]


def request_view(request: web.BaseRequest, body: bytes, scheme: str) -> RequestView:
    """The RFC 9421 view of an aiohttp request: raw header lines, raw path, raw body.

    Header lines are the wire's, in wire order, each value the latin-1 reading of its raw bytes.
    aiohttp's own ``request.headers`` holds the same lines read as UTF-8, so when every value is
    ASCII (both readings agree) it is used as is; otherwise the lines are rebuilt from
    ``raw_headers``.
    """
    headers = request.headers
    if not "".join(headers.values()).isascii():
        headers = CIMultiDict([(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers])
    host = headers.get("Host") or request.host
    return RequestView(request.method, f"{scheme}://{host}{request.raw_path}", headers, body, request.raw_path)  # type: ignore[arg-type]


_DOT = re.compile(r"(^|/)(\.|%2e){1,2}(/|$)", re.IGNORECASE)


def canonical_path(raw_path: str) -> bool:
    """False for dot segments, plain or encoded (``/a/../b``, ``/a/%2e%2e/b``): the signed path and
    the routed path could differ, so such requests are refused rather than normalised (pitfall 6)."""
    path = raw_path.split("?", 1)[0]
    # a dot segment needs "." or "%2e": most paths have neither, so the regex is skipped
    return ("." not in path and "%2" not in path) or _DOT.search(path) is None


def decoded_body(request: web.Request, *, limit: int = 10 * 1024 * 1024) -> bytes:
    """``request[REQ_RAW_BODY]`` with its Content-Encoding (gzip, deflate, identity) undone.

    Request decompression is off app-wide so digests cover the bytes as sent (RFC 9530 §2);
    handlers that parse the body call this after verification. Raises BadRequest for an unknown
    encoding, a corrupt or truncated stream or bytes after its end, or more than ``limit`` decoded
    bytes (decompression bombs).
    """
    raw = request[REQ_RAW_BODY]
    enc = request.headers.get("Content-Encoding", "identity").strip().lower()
    if enc in ("", "identity"):
        return raw
    if enc not in DECODED_CODINGS:
        raise BadRequest(f"unsupported Content-Encoding {enc!r}")
    wbits = 16 + zlib.MAX_WBITS if enc != "deflate" else zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error:
        raise BadRequest("corrupt compressed body") from None
    if len(out) > limit or d.unconsumed_tail:
        raise BadRequest("decompressed body too large")
    # the whole body is one complete stream: a truncated one, or bytes after its end (a second gzip
    # member), would leave part of what was signed unread
    if not d.eof or d.unused_data:
        raise BadRequest("corrupt compressed body")
    return out


async def sign_response(
    request: web.Request,
    response: web.Response,
    *,
    pool,
    company_id: UUID,
    now: dt.datetime,
    scheme: str,
    key=None,
) -> web.Response:
    """Sign a buffered response with the company's active key (RFC 9421 §2.4; UCP signatures.md).

    The body must already be bytes (serialised once); the digest is taken over exactly those bytes
    and the response must not be compressed or altered afterwards. ``key``: the company's active
    ``keys.SigningKey`` when the caller already holds it (:class:`.signkey.SigningKeys`), else it is
    read here. Raises NoActiveKey / KeyDecryptError from the keys package.
    """
    body = response.body
    if not isinstance(body, (bytes, bytearray)):
        body = b"" if body is None else bytes(body._value)  # type: ignore[union-attr]
    if key is None:
        from ..keys.active import active_signing_key

        key = await active_signing_key(pool, company_id, now=now)
    raw = request.get(REQ_RAW_BODY, b"")
    req_view = request_view(request, raw, scheme)
    headers: CIMultiDict[str] = CIMultiDict(response.headers)
    if body and "Content-Type" not in headers:
        headers["Content-Type"] = response.content_type
    view = ResponseView(response.status, headers, req_view, bytes(body))
    sign_response_view(view, key, now=now, accept_signature=request.headers.get("Accept-Signature"))
    for name in ("Content-Digest", "Signature-Input", "Signature", "Content-Type"):
        if name in headers:
            response.headers[name] = headers[name]
    if "Accept-Signature" in request.headers:
        response.headers.add("Vary", "Accept-Signature")
    return response

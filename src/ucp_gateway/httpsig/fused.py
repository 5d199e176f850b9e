"""One fused route for the usual signed request (RFC 9421 §3.2 with UCP signatures.md policy).

The usual UCP request carries exactly one signature: one ``Signature-Input`` line
``label=("c1" "c2" ...)`` with bare component names and registered parameters in canonical form,
one ``Signature`` line ``label=:base64:``, a keyid, single-line ASCII field values, and with a body
a one-member sha-256 or sha-512 ``Content-Digest``. :func:`verify_fused` checks such a request in
one pass over the aiohttp headers, without a RequestView, a ParsedSignature or a parameter dict.

Anything else returns None before the first key lookup, and :func:`.verify.verify_request` (the
reference) decides. From the key lookup on, the checks run in the reference's order with its
errors and messages, so the outcome (accepted, or which error) is the reference's: every request is
still fully verified (coverage, digest over the raw body, ECDSA over the rebuilt base, freshness,
replay). tests/httpsig/test_fused.py compares both routes on valid and tampered requests.
Nothing here is kept per request: caches hold readings of the component list and the URL, which
recur across requests (see :func:`.base._plan`, :func:`.base._url_components`).
"""

from __future__ import annotations

import binascii
import datetime as dt
import hashlib
import hmac
import itertools
import re
from functools import lru_cache
from typing import Any

from cryptography.exceptions import InvalidSignature
from http_message_signatures import HTTPMessageSignaturesException

from .base import _plan, _url_components
from .errors import AlgorithmUnsupported, DigestMismatch, KeyNotFound, SignatureInvalid
from .jwkalg import _algorithm, algorithm_for_jwk, key_verify
from .policy import MUTATING_METHODS, SignaturePolicy, check_times
from .replay import ReplayStore
from .resolver import KeyResolver
from .verify import VerifiedSignature, _missing, _profile_url, _remember, _verified, coverage_error

__all__ = ["verify_fused"]

_ID = r'"[a-z0-9@!#$%&\'*+.^_`|~-]+"'
_INT = r"(0|-?[1-9][0-9]{0,14})"  # as strict serialization writes an integer (no "-0", no leading 0)
_STR = r'"([\x20\x21\x23-\x5b\x5d-\x7e]*)"'  # a String without escapes
# label=("c1" "c2" ...) then registered parameters in canonical form, in any order. Groups: label,
# the @signature-params value (RFC 9421 §2.3), the inner list, the parameters, then one group per
# parameter (created, expires, keyid, nonce, tag, alg; a repeat keeps the last: refused below).
_HEAD = re.compile(rf"([a-z*][a-z0-9_.*-]*)=\(({_ID}(?: {_ID})*)\)")
_PARAMS = re.compile(rf"(?:;created={_INT}|;expires={_INT}|;keyid={_STR}|;nonce={_STR}|;tag={_STR}|;alg={_STR})*")
_DIGEST = re.compile(r"(sha-256|sha-512)=:([A-Za-z0-9+/]*={0,2}):")
_HASHES = {"sha-256": hashlib.sha256, "sha-512": hashlib.sha512}
_SHAPES = tuple(itertools.product((False, True), repeat=4))  # (mutating, query, ucp-agent, body)


@lru_cache(maxsize=256)
def _head(head: str) -> tuple[str, str, tuple] | None:
    """``label=("c1" "c2" ...)`` (the Signature-Input up to its first ")") as ``(label,
    "label=:", route)``; None for another shape. Depends only on the text: one signer sends the
    same head on every request (its parameters, which vary, are read per request)."""
    m = _HEAD.fullmatch(head)
    route = None if m is None else _route(m.group(2))
    return None if route is None else (m.group(1), m.group(1) + "=:", route)


@lru_cache(maxsize=256)
def _route(inner: str) -> tuple[tuple[str, ...], tuple, bool, str, tuple[tuple[str, ...], ...]] | None:
    """For the inner list text ``"c1" "c2" ...``: the component ids, the base plan (steps, whether
    the URL is needed, ``%`` template; :func:`.base._plan`) and the missing required names for each
    request shape (index ``8*mutating + 4*query + 2*ucp_agent + body``); None where the plan is
    (components the fast base does not build). Depends only on the text, never on request values."""
    ids = tuple(inner.split(" "))
    plan = _plan(ids)
    if plan is None:
        return None
    steps, _inner, uses_url, template = plan
    return ids, steps, uses_url, template, tuple(_missing(shape, ids) for shape in _SHAPES)


async def verify_fused(
    headers: Any,
    method: str,
    url: str,
    body: bytes,
    resolver: KeyResolver,
    policy: SignaturePolicy,
    now: dt.datetime,
    replay_store: ReplayStore | None = None,
) -> VerifiedSignature | None:
    """Verify the usual signed request in one pass, or return None (before any key lookup) when
    it is not one; then :func:`.verify.verify_request` must decide.

    Args: ``headers``: the request's field lines (a multidict, e.g. aiohttp ``request.headers``);
    ``method``; ``url``: the trusted external origin + raw request-target (as
    :class:`.rfc9421.RequestView`); ``body``: the content as received; the rest as for
    :func:`.verify.verify_request`, which this returns and raises as (same errors, same order).
    """
    si = headers.getall("Signature-Input", None)
    sg = headers.getall("Signature", None)
    if si is None or sg is None or len(si) != 1 or len(sg) != 1 or policy.tag is not None:
        return None
    si0 = si[0]
    end = si0.find(")") + 1  # component names hold no ")": the inner list ends at the first one
    head = _head(si0[:end]) if end else None
    if head is None:
        return None
    label, prefix, route = head
    ptxt = si0[end:]
    m = _PARAMS.fullmatch(ptxt)
    if m is None:
        return None
    created, expires, kid, nonce, tag, alg = m.groups()
    # a repeated parameter leaves fewer groups set than ";" (as does a ";" inside a string)
    if not kid or ptxt.count(";") + (created, expires, kid, nonce, tag, alg).count(None) != 6:
        return None
    sig_params = si0[len(label) + 1 :]  # the @signature-params value (RFC 9421 §2.3)
    sg0 = sg[0]
    n = len(prefix)
    if len(sg0) <= n or not sg0.startswith(prefix) or sg0[-1] != ":":
        return None
    try:
        signature = binascii.a2b_base64(sg0[n:-1], strict_mode=True)
    except ValueError:  # binascii.Error, or a non-ASCII value
        return None
    ucp_agent = headers.get("UCP-Agent")
    if (ucp_agent is not None and not ucp_agent.isascii()) or not (method.isalpha() and method.isupper()):
        return None
    ids, steps, uses_url, template, missing_by_shape = route
    # the signature base (RFC 9421 §2.5), as .base.fast_base_for_ids builds it for single-line,
    # printable ASCII values without tabs
    derived: Any = None
    if uses_url:
        if not url.isascii():
            return None
        derived = _url_components(url, method)
        if derived is None:
            return None
    getall = headers.getall
    values = []
    for kind, name in steps:
        if kind is None:  # a field
            lines = getall(name, None)
            if lines is None or len(lines) != 1:
                return None
            values.append(lines[0].strip(" \t"))
        elif kind == "@method":
            values.append(method)
        else:  # @authority @path @query @scheme @target-uri
            value = derived[kind]
            if value is None:
                return None
            values.append(value)
    joined = "".join(values)
    if not (joined.isascii() and joined.isprintable()):
        return None
    values.append(sig_params)
    base = (template % tuple(values)).encode("ascii")
    digest_ok = True
    if body or "Content-Digest" in headers:  # RFC 9530 over the raw body (.rfc9530.check_content_digest)
        lines = getall("Content-Digest", None)
        d = _DIGEST.fullmatch(lines[0]) if lines is not None and len(lines) == 1 else None
        if d is None:
            return None
        try:
            got = binascii.a2b_base64(d.group(2), strict_mode=True)
        except ValueError:
            return None
        digest_ok = hmac.compare_digest(got, _HASHES[d.group(1)](body).digest())
    q = url.find("?", url.find("://") + 3 if "://" in url else 0)  # as .verify._request_shape
    missing = missing_by_shape[
        8 * (method in MUTATING_METHODS) + 4 * (0 <= q < len(url) - 1) + 2 * (ucp_agent is not None) + bool(body)
    ]

    # From here on: the reference's steps in its order (verify_request, _verify_one, verify_signature).
    profile_url = _profile_url(ucp_agent, policy.allow_http_profiles)
    jwk = await resolver.resolve(profile_url, kid, force_refresh=False)
    if jwk is None:
        jwk = await resolver.resolve(profile_url, kid, force_refresh=True)
        if jwk is None:
            raise KeyNotFound("signature key not found in the caller's profile")
    alg_cls, size = algorithm_for_jwk(jwk)
    alg_id = alg_cls.algorithm_id
    if alg_id == "ecdsa-p384-sha384" and not policy.allow_es384:
        raise AlgorithmUnsupported("ES384 is not accepted")
    if alg is not None and alg != alg_id:
        raise AlgorithmUnsupported("the alg parameter does not match the key")
    if expires is not None:
        expires = int(expires)
    if created is not None:
        created = int(created)
    check_times(created, expires, nonce is not None, policy, now.timestamp())  # .policy.check_freshness
    if missing:
        raise coverage_error(missing, headers)
    if not digest_ok:
        raise DigestMismatch("Content-Digest does not match the request body")
    algorithm = _algorithm(str(jwk["crv"]), jwk.get("x"), jwk.get("y"), size)
    try:
        key_verify(algorithm, signature, base)
    except (HTTPMessageSignaturesException, InvalidSignature, ValueError, TypeError, AssertionError) as exc:
        raise SignatureInvalid("request signature verification failed") from exc
    result = _verified(kid, profile_url, label, ids, created, expires, nonce, tag, alg_id, jwk)
    if nonce is not None and replay_store is not None:
        await _remember(result, policy, now, replay_store)
    return result

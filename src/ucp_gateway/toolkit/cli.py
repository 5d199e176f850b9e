"""The partner toolkit on the command line:

- ``ucp-gateway sign URL [-X M] [-H 'N: v']... [-d DATA|@FILE] [--key FILE] [--profile URL] [--send]``:
  sign a request as a UCP platform does; print the headers, or (``--send``) send it, print the
  answer (``-i`` style) and check its signature against the business profile.
- ``ucp-gateway verify [FILE|-] (--jwk FILE | --profile URL) [--request FILE] [--rfc9421]``: check
  a captured request, response or webhook; print the signature base, the digests, the coverage
  verdict and the key used (for UCP requests the admin debug endpoint's own view); exit 1 with
  the spec's error code on any failure.
- ``ucp-gateway doctor URL [--roundtrip ITEM]``: check a business or platform profile and the server
  behind it (:mod:`.doctor`); exit 0, 1 or 2 by the worst finding (ok, warning, error).
- ``ucp-gateway keys generate-agent --profile-url URL [--alg ES256|EdDSA] [--out DIR]``: a new
  agent key and the platform profile JSON that publishes it.

The key file is a private JWK (never a flag value: it stays out of shell history); without
``--key`` the agent key of :mod:`..transports.agentkey` (``UCPGW_AGENT_KEY[_FILE]``) is used.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp

from ..clibase import common_parser, emit
from ..config import Settings
from ..errors import BadRequest, ConfigError
from ..httpsig.debug import debug_signature, parse_http_message
from ..httpsig.policy import SignaturePolicy
from ..httpsig.resolver import keys_of_profile
from ..httpsig.rfc9421 import RequestView
from ..transports.agentkey import ENV_PROFILE, agent_key_from_jwk, generate_agent_jwk, load_agent_key
from ..versions import ROOT, VERSIONS
from .inspect import inspect_message, required_for
from .sign import (
    agent_profile,
    fetch_business_keys,
    parse_headers,
    read_data,
    send,
    sign_request,
    target_url,
    verify_response,
)

__all__ = ["register"]


def _now(args: argparse.Namespace) -> dt.datetime:
    ts = getattr(args, "now", None)
    return dt.datetime.fromtimestamp(ts, dt.UTC) if ts is not None else dt.datetime.now(dt.UTC)


def _read(path: str | None) -> bytes:
    """A file's bytes (``-`` or None: standard input). Raises ConfigError."""
    if path in (None, "-"):
        return sys.stdin.buffer.read()
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _write_agent_files(out_dir: str, jwk: dict, profile: dict, *, force: bool) -> tuple[Path, Path]:
    """``agent-key.jwk`` (mode 0600, created so: never readable by others) and ``profile.json``."""
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    key_path, profile_path = out / "agent-key.jwk", out / "profile.json"
    if key_path.exists() and not force:
        raise ConfigError(f"{key_path} exists (use --force to replace it)")
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(jwk, f, indent=2)
    profile_path.write_text(json.dumps(profile, indent=2) + "\n")
    return key_path, profile_path


def _load_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).expanduser().read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    except ValueError:
        raise ConfigError(f"{what} {path} is not JSON") from None


def _agent_key(args: argparse.Namespace):
    profile = args.profile or os.environ.get(ENV_PROFILE)
    if args.key:
        if not profile:
            raise ConfigError(f"--profile (or {ENV_PROFILE}): the agent's profile URL, sent in UCP-Agent")
        return agent_key_from_jwk(_load_json(args.key, "key file"), profile)
    key = load_agent_key()
    if key is None:
        raise ConfigError("give --key FILE (a private JWK) or set UCPGW_AGENT_KEY / UCPGW_AGENT_KEY_FILE")
    return key if not args.profile else type(key)(key.kid, key.private_key, args.profile)


def _print_signature_report(rep: dict[str, Any], out=sys.stdout) -> None:
    cd = rep.get("content_digest") or {}
    if cd.get("received") is not None:
        verdict = "matches" if cd.get("match") else cd.get("error") or "DOES NOT MATCH"
        computed = cd["computed"]["sha-256"]
        print(f"content-digest: {cd['received']} ({verdict}; sha-256 of the body: {computed})", file=out)
    if rep.get("required_components") is not None:
        print("required components: " + " ".join(rep["required_components"]), file=out)
    for s in rep.get("signatures") or []:
        params = ";".join(f"{k}={v}" for k, v in s["params"].items())
        print(f"signature {s['label']}: ({' '.join(s['components'])});{params}", file=out)
        key = s.get("key") or {}
        if key:
            print(f"  key {key.get('kid')}: {'found' if key.get('found') else 'NOT FOUND'}", file=out)
        if s.get("missing_components"):
            print("  missing components: " + " ".join(s["missing_components"]), file=out)
        if s.get("looks_der_encoded"):
            print("  the signature looks DER-encoded: RFC 9421 §3.3.4 wants raw r||s (64 bytes for ES256)", file=out)
        if "signature_base" in s:
            print("  signature base:", file=out)
            for line in s["signature_base"].split("\n"):
                print("    " + line, file=out)
        elif "signature_base_error" in s:
            print(f"  signature base cannot be built: {s['signature_base_error']}", file=out)
        if s.get("error"):
            print(f"  {s['error']['code']}: {s['error']['content']}", file=out)
    v = rep["verdict"]
    if v["ok"]:
        print(f"verdict: valid ({v.get('label')}, key {v.get('kid')})", file=out)
    else:
        print(f"verdict: INVALID {v['code']}: {v['content']}", file=out)


class _Keys:
    """A KeyResolver over a fixed ``kid -> JWK`` map, whatever profile the message names."""

    def __init__(self, keys: dict[str, dict]):
        self.keys = keys

    async def resolve(self, profile_url: str, kid: str, *, force_refresh: bool = False) -> dict | None:
        return self.keys.get(kid)


def _keys_of(doc: Any) -> dict[str, dict]:
    """``kid -> JWK`` of a JWK, a JWK Set or a UCP profile document."""
    if isinstance(doc, dict) and "kty" in doc:
        items = [doc]
    else:
        items = keys_of_profile(doc)
    keys = {k["kid"]: k for k in items if isinstance(k.get("kid"), str)}
    if not keys:
        raise ConfigError("no key with a kid in the given JWK, JWK Set or profile")
    return {kid: {n: v for n, v in k.items() if n != "d"} for kid, k in keys.items()}  # public parts only


async def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    raw = _read(args.file)
    if args.jwk:
        keys = _keys_of(_load_json(args.jwk, "key file"))
    elif args.profile:
        keys = await _profile_keys(args.profile)
    else:
        raise BadRequest("give --jwk FILE or --profile URL: the keys to verify against")
    now = _now(args)
    request = None
    if args.request:
        request = parse_http_message(_read(args.request), scheme=args.scheme)
        if not isinstance(request, RequestView):
            raise BadRequest("--request must hold the request the response answers")
    view = parse_http_message(raw, scheme=args.scheme, request=request)
    ucp_request = isinstance(view, RequestView) and "Webhook-Id" not in view.headers and not args.rfc9421
    if ucp_request:
        policy = SignaturePolicy(allow_http_profiles=args.allow_http_profile)
        rep = await debug_signature(raw, resolver=_Keys(keys), policy=policy, now=now, scheme=args.scheme)
    elif args.rfc9421:
        rep = inspect_message(view, keys, now=now)
    else:
        rep = inspect_message(view, keys, now=now, required=required_for(view), policy=SignaturePolicy())
    if args.json:
        emit(args, rep, "")
    else:
        _print_signature_report(rep)
    return 0 if rep["verdict"]["ok"] else 1


async def _profile_keys(url: str) -> dict[str, dict]:
    """Keys of the profile document at exactly ``url`` (a platform profile)."""
    status, _h, body = await send("GET", url, {"Accept": "application/json"}, b"")
    if status != 200:
        raise ConfigError(f"the profile {url} answered {status}")
    try:
        return _keys_of(json.loads(body))
    except ValueError:
        raise ConfigError(f"the profile {url} is not JSON") from None


async def cmd_sign(args: argparse.Namespace, settings: Settings) -> int:
    key = _agent_key(args)
    args.url = target_url(args.url)
    body = read_data(args.data, sys.stdin)
    method = (args.request_method or ("POST" if body else "GET")).upper()
    headers = parse_headers(args.header or [])
    if body and "Content-Type" not in headers:
        headers["Content-Type"] = "application/json"
    now = _now(args)
    extra = {"accept_signature": None} if args.no_response_signature else {}
    signed = sign_request(key, method, args.url, headers, body, now=now, **extra)
    if not args.send:
        text = "\n".join(f"{k}: {v}" for k, v in signed.items())
        emit(args, {"method": method, "url": args.url, "headers": signed}, text)
        return 0
    try:
        status, rh, rbody = await send(method, args.url, signed, body, seconds=args.timeout)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ConfigError(f"cannot reach {args.url}: {exc.__class__.__name__}: {exc}") from None
    report = None
    if "Signature" in rh or "Signature-Input" in rh:
        keys = await fetch_business_keys(args.url)
        report = verify_response(method, args.url, signed, body, status, rh, rbody, keys, now=_now(args))
    if args.json:
        try:
            parsed: Any = json.loads(rbody)
        except ValueError:
            parsed = rbody.decode("utf-8", "replace")
        emit(args, {"status": status, "headers": dict(rh.items()), "body": parsed, "response_signature": report}, "")
    else:
        print(f"HTTP {status}")
        for k, v in rh.items():
            print(f"{k}: {v}")
        print()
        print(rbody.decode("utf-8", "replace"))
        if report is None:
            print("response signature: none (the business did not sign this answer)", file=sys.stderr)
        else:
            _print_signature_report(report, out=sys.stderr)
    failed = report is not None and not report["verdict"]["ok"]
    return 1 if failed or status >= 400 else 0


async def cmd_generate_agent(args: argparse.Namespace, settings: Settings) -> int:
    try:
        jwk = generate_agent_jwk(args.alg, args.kid)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    public = agent_key_from_jwk(jwk, args.profile_url).public_jwk()
    profile = agent_profile(public, version=args.version, webhook_url=args.webhook_url)
    key_path, profile_path = _write_agent_files(args.out, jwk, profile, force=args.force)
    emit(
        args,
        {"kid": public["kid"], "key_file": str(key_path), "profile_file": str(profile_path), "profile": profile},
        f"kid {public['kid']} ({args.alg})\nprivate key: {key_path} (mode 0600; keep it secret)\n"
        f"profile:     {profile_path} (host it at {args.profile_url})",
    )
    return 0


async def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from .doctor import SEVERITY_EXIT, run_doctor

    findings = await run_doctor(target_url(args.url), allow_http=args.allow_http, roundtrip_item=args.roundtrip)
    worst = max((SEVERITY_EXIT[f.severity] for f in findings), default=0)
    marks = {"ok": "ok  ", "warning": "WARN", "error": "FAIL"}
    text = "\n".join(f"{marks[f.severity]}  {f.check:18} {f.message}  [{f.spec}]" for f in findings)
    emit(args, {"findings": [f.as_dict() for f in findings], "exit": worst}, text)
    return worst


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sign``, ``verify``, ``doctor`` and ``keys generate-agent``."""
    p = sub.add_parser("doctor", help="check a UCP profile and the server behind it", parents=[common_parser()])
    p.add_argument("url", help="a business's /.well-known/ucp, or a platform profile URL")
    p.add_argument("--allow-http", action="store_true", help="an http URL is a warning, not an error (dev)")
    p.add_argument("--roundtrip", metavar="ITEM_ID", help="one signed create-checkout of this item, with a "
                   "throwaway key whose profile is served on 127.0.0.1 (the business must accept it)")  # fmt: skip
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("sign", help="sign (and --send) a request as a UCP platform", parents=[common_parser()])
    p.add_argument("url")
    p.add_argument("-X", "--request", dest="request_method", help="method (default GET, POST with -d)")
    p.add_argument("-H", "--header", action="append", help="'Name: value' (repeatable)")
    p.add_argument("-d", "--data", help="body: text, @FILE or @- (standard input)")
    p.add_argument("--key", help="the agent's private JWK file (default UCPGW_AGENT_KEY[_FILE])")
    p.add_argument("--profile", help=f"the agent's profile URL (default ${ENV_PROFILE})")
    p.add_argument("--send", action="store_true", help="send it and check the signed answer")
    p.add_argument("--no-response-signature", action="store_true", help="send no Accept-Signature")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--now", type=int, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_sign)

    p = sub.add_parser("verify", help="verify a captured request, response or webhook", parents=[common_parser()])
    p.add_argument("file", nargs="?", help="raw HTTP message (default standard input)")
    p.add_argument("--jwk", help="a JWK, JWK Set or profile JSON file with the signer's key")
    p.add_argument("--profile", help="the signer's profile URL (a business: its /.well-known/ucp)")
    p.add_argument("--request", help="for a response: the request it answers (raw HTTP)")
    p.add_argument("--rfc9421", action="store_true", help="the signature alone: no UCP coverage or freshness")
    p.add_argument("--scheme", default="https", help="scheme of the request's URL (default https)")
    p.add_argument("--now", type=int, help="verify as of this UNIX time")
    p.add_argument("--allow-http-profile", action="store_true", help="accept an http:// UCP-Agent profile (dev)")
    p.set_defaults(func=cmd_verify)

    keys = sub.choices.get("keys") or sub.add_parser("keys", help="per-company signing keys")
    ks = next(a for a in keys._actions if isinstance(a, argparse._SubParsersAction))
    p = ks.add_parser("generate-agent", help="a new agent key and its platform profile", parents=[common_parser()])
    p.add_argument("--profile-url", required=True, help="where the profile will be hosted (https)")
    p.add_argument("--alg", default="ES256", choices=["ES256", "EdDSA"])
    p.add_argument("--kid", help="key id (default: the RFC 7638 thumbprint)")
    p.add_argument("--version", default=ROOT, choices=list(VERSIONS), help=f"UCP version (default {ROOT})")
    p.add_argument("--webhook-url", help="the order capability's webhook_url")
    p.add_argument("--out", default=".", help="directory for agent-key.jwk and profile.json")
    p.add_argument("--force", action="store_true", help="replace an existing agent-key.jwk")
    p.set_defaults(func=cmd_generate_agent)

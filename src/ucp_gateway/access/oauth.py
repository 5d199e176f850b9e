"""The gateway as each company's OAuth 2.0 authorization server for the client-credentials grant.

Routes on a company host (exempt from the signature layer: Google's token calls carry no
``UCP-Agent`` and no signature)::

    POST /oauth2/token                              RFC 6749 §4.4 client credentials
    POST /oauth2/revoke                             RFC 7009
    GET  /.well-known/oauth-authorization-server    RFC 8414 metadata

Client authentication (RFC 6749 §2.3.1): ``client_secret_basic`` (``Authorization: Basic``),
``client_secret_post`` (``client_id`` + ``client_secret`` in the body) or ``private_key_jwt``
(RFC 7523 §2.2, a client registered with public keys: :mod:`.client_jwt`); the body may be form-encoded
or JSON (Google's merchant guide offers both). Tokens are opaque (``ucpot_`` + 256 random bits), bound
to the company and the client, ``oauth_token_ttl`` seconds (default 900), stored as SHA-256 only;
a revoked token or client is refused at once. Errors are RFC 6749 §5.2 bodies (``invalid_client``
401 with ``WWW-Authenticate: Basic``, ``invalid_request`` / ``unsupported_grant_type`` /
``invalid_scope`` 400), with ``Cache-Control: no-store`` on every answer.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import secrets
from typing import Any
from urllib.parse import parse_qsl, unquote

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, REQ_COMPANY, SETTINGS
from ..clock import SystemClock
from ..db import tenant_tx
from ..httpsig.replay import remember_on
from ..jsonbody import InvalidJson, loads_strict
from ..mediatype import json_response
from ..tenancy import public_origin
from . import client_jwt
from .credentials import get_client, secret_hash

__all__ = ["ACCESS_TOKEN_PREFIX", "SCOPES", "TOKEN_PATH", "setup_routes", "token_client"]

TOKEN_PATH = "/oauth2/token"  # noqa: S105 - a path
REVOKE_PATH = "/oauth2/revoke"
METADATA_PATH = "/.well-known/oauth-authorization-server"
ACCESS_TOKEN_PREFIX = "ucpot_"  # noqa: S105 - a prefix
#: scopes a platform token may carry (UCP identity-linking names; Google's older one); none asked: "ucp"
SCOPES = ("ucp", "dev.ucp.shopping.checkout:manage", "dev.ucp.shopping.order:read", "ucp:scopes:checkout_session")
_MAX_BODY = 16 * 1024
AUTH_METHODS = ["client_secret_basic", "client_secret_post", "private_key_jwt"]
#: replay-store keyid prefix of client assertion jtis: ``private_key_jwt:<company id>:<client id>``
JTI_KEYID = "private_key_jwt:"


class OAuthError(Exception):
    def __init__(self, error: str, description: str, status: int = 400):
        super().__init__(description)
        self.error, self.description, self.status = error, description, status


def _answer(body: dict[str, Any], status: int = 200, *, basic: bool = False) -> web.Response:
    headers = {"Cache-Control": "no-store", "Pragma": "no-cache"}
    if status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="ucp"' if basic else 'Bearer realm="ucp"'
    return json_response(body, status=status, headers=headers)


def _error(exc: OAuthError, *, basic: bool) -> web.Response:
    return _answer({"error": exc.error, "error_description": exc.description}, exc.status, basic=basic)


async def _params(request: web.Request) -> dict[str, str]:
    """The body parameters: ``application/x-www-form-urlencoded`` or JSON (string values only)."""
    raw = await request.read()
    if len(raw) > _MAX_BODY:
        raise OAuthError("invalid_request", "request body too large")
    ctype = request.content_type
    if ctype == "application/json":
        try:
            data = loads_strict(raw or b"{}")
        except InvalidJson:
            raise OAuthError("invalid_request", "body is not valid JSON") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise OAuthError("invalid_request", "body must be a JSON object of strings")
        return data
    if ctype in ("application/x-www-form-urlencoded", ""):
        try:
            pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(raw))
        except (UnicodeDecodeError, ValueError):
            raise OAuthError("invalid_request", "body is not a valid form") from None
        out: dict[str, str] = {}
        for k, v in pairs:
            if k in out:  # RFC 6749 §3.2: parameters MUST NOT be included more than once
                raise OAuthError("invalid_request", f"parameter {k} repeated")
            out[k] = v
        return out
    raise OAuthError("invalid_request", "body must be application/x-www-form-urlencoded or application/json")


def _basic(request: web.Request) -> tuple[str, str] | None:
    auth = request.headers.get("Authorization", "")
    if auth[:6].lower() != "basic ":
        return None
    try:
        user, sep, password = base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise OAuthError("invalid_client", "malformed Basic credentials", 401) from None
    if not sep:
        raise OAuthError("invalid_client", "malformed Basic credentials", 401)
    return unquote(user), unquote(password)  # RFC 6749 §2.3.1: form-encoded before Basic


async def token_client(request: web.Request, conn, params: dict[str, str]) -> Any:
    """Authenticate the client of a token or revocation request (one advertised method per request:
    ``client_secret_basic``, ``client_secret_post`` or ``private_key_jwt``, :mod:`.client_jwt`).
    Returns its row. Raises OAuthError ``invalid_client`` (401), ``invalid_request`` (400) for two
    methods at once."""
    basic = _basic(request)
    if basic is not None and ("client_secret" in params or "client_assertion" in params):
        raise OAuthError("invalid_request", "use one client authentication method")
    if "client_assertion" in params or "client_assertion_type" in params:
        if "client_secret" in params:
            raise OAuthError("invalid_request", "use one client authentication method")
        return await _assertion_client(request, conn, params)
    client_id, secret = basic if basic is not None else (params.get("client_id"), params.get("client_secret"))
    if not client_id or secret is None:
        raise OAuthError("invalid_client", "client authentication is required", 401)
    row = await get_client(conn, client_id)
    expected = row["secret_hash"] if row is not None else None
    # constant time; an unknown client costs the same comparison
    if not hmac.compare_digest(expected or "0" * 64, secret_hash(secret)) or expected is None:
        raise OAuthError("invalid_client", "client authentication failed", 401)
    return row


async def _assertion_client(request: web.Request, conn, params: dict[str, str]) -> Any:
    """``private_key_jwt`` (RFC 7523 §2.2): the client's row once its assertion verified and its
    ``jti`` was recorded (single-use, in the replay store until ``exp``, in the caller's transaction). Raises OAuthError
    ``invalid_client`` (401) for any fault of the assertion, ``client_id`` or client."""
    if params.get("client_assertion_type") != client_jwt.ASSERTION_TYPE:
        raise OAuthError("invalid_client", f"client_assertion_type must be {client_jwt.ASSERTION_TYPE}", 401)
    assertion = params.get("client_assertion") or ""
    try:
        client_id = client_jwt.client_of(assertion)
        if params.get("client_id", client_id) != client_id:  # RFC 7521 §4.2: optional, but then the same
            raise client_jwt.AssertionRefused("client_id is not the assertion's sub")
        row = await get_client(conn, client_id)
        if row is None or not row["jwks"]:
            raise client_jwt.AssertionRefused("no such client with registered keys")
        issuer = _issuer(request)
        audiences = {issuer, issuer + "/", issuer + request.path}
        now = _now(request)
        verified = client_jwt.verify_assertion(
            assertion, row["jwks"], client_id=client_id, audiences=audiences, now=int(now.timestamp())
        )
    except client_jwt.AssertionRefused as exc:
        raise OAuthError("invalid_client", str(exc), 401) from None
    # the replay store's table (a platform table, seen from the tenant transaction), in this
    # transaction: one connection per request
    ttl = max(1, verified.exp - int(now.timestamp()) + client_jwt.SKEW)
    keyid = f"{JTI_KEYID}{request[REQ_COMPANY].id}:{client_id}"
    if not await remember_on(conn, keyid, verified.jti, now=now, ttl=ttl):
        raise OAuthError("invalid_client", "the client assertion was already used (jti)", 401)
    return row


def _scope(asked: str | None) -> str:
    if not asked:
        return "ucp"
    wanted = asked.split()
    unknown = [s for s in wanted if s not in SCOPES]
    if unknown:
        raise OAuthError("invalid_scope", f"unknown scope {unknown[0][:60]!r}")
    return " ".join(dict.fromkeys(wanted))


def _now(request: web.Request) -> dt.datetime:
    return (request.app.get(CLOCK) or SystemClock()).now()


def _endpoint(request: web.Request):
    """``(company, basic)`` of a request on a token endpoint: the host's company (404 without one)
    and whether the client authenticates with HTTP Basic (a 401 then asks for Basic, not Bearer)."""
    company = request.get(REQ_COMPANY)
    if company is None:
        raise web.HTTPNotFound()
    return company, request.headers.get("Authorization", "")[:6].lower() == "basic "


async def token_handler(request: web.Request) -> web.Response:
    company, basic = _endpoint(request)
    try:
        params = await _params(request)
        if params.get("grant_type") != "client_credentials":
            if not params.get("grant_type"):
                raise OAuthError("invalid_request", "grant_type is required")
            raise OAuthError("unsupported_grant_type", "only client_credentials is supported")
        scope = _scope(params.get("scope"))
        ttl = request.app[SETTINGS].oauth_token_ttl
        now = _now(request)
        token = ACCESS_TOKEN_PREFIX + secrets.token_urlsafe(32)
        async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
            client = await token_client(request, conn, params)
            await conn.execute(
                "INSERT INTO oauth_access_tokens (company_id, token_hash, client_id, scope, issued_at, expires_at)"
                " VALUES ($1, $2, $3, $4, $5, $6)",
                company.id, secret_hash(token), client["id"], scope, now, now + dt.timedelta(seconds=ttl),
            )  # fmt: skip
    except OAuthError as exc:
        return _error(exc, basic=basic)
    return _answer({"access_token": token, "token_type": "Bearer", "expires_in": ttl, "scope": scope})


async def revoke_handler(request: web.Request) -> web.Response:
    """RFC 7009: the client revokes one of its tokens; 200 whatever the token was (§2.2)."""
    company, basic = _endpoint(request)
    try:
        params = await _params(request)
        token = params.get("token")
        if not token:
            raise OAuthError("invalid_request", "token is required")
        async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
            client = await token_client(request, conn, params)
            await conn.execute(
                "UPDATE oauth_access_tokens SET revoked_at = $3 WHERE token_hash = $1 AND client_id = $2"
                " AND revoked_at IS NULL",
                secret_hash(token), client["id"], _now(request),
            )  # fmt: skip
    except OAuthError as exc:
        return _error(exc, basic=basic)
    return _answer({})


def _issuer(request: web.Request) -> str:
    s = request.app[SETTINGS]
    return public_origin(s.public_scheme, request.host.lower(), s.public_port)


async def metadata_handler(request: web.Request) -> web.Response:
    """RFC 8414 §2 for the company of this host."""
    if request.get(REQ_COMPANY) is None:
        raise web.HTTPNotFound()
    issuer = _issuer(request)
    return json_response(
        {
            "issuer": issuer,
            "token_endpoint": issuer + TOKEN_PATH,
            "revocation_endpoint": issuer + REVOKE_PATH,
            "grant_types_supported": ["client_credentials"],
            "response_types_supported": [],
            "token_endpoint_auth_methods_supported": AUTH_METHODS,
            "token_endpoint_auth_signing_alg_values_supported": list(client_jwt.JWS_ALGORITHMS),
            "revocation_endpoint_auth_methods_supported": AUTH_METHODS,
            "revocation_endpoint_auth_signing_alg_values_supported": list(client_jwt.JWS_ALGORITHMS),
            "scopes_supported": list(SCOPES),
        },
        headers={"Cache-Control": "public, max-age=300"},
    )


def setup_routes(app: web.Application) -> None:
    app.router.add_post(TOKEN_PATH, token_handler)
    app.router.add_post(REVOKE_PATH, revoke_handler)
    app.router.add_get(METADATA_PATH, metadata_handler)

"""Consent inside an MCP tool call (imperative shell): the question is asked, kept and answered
across replicas; the call resumes once.

``/ucp/mcp`` keeps no session in memory, so every piece is readable by any replica:

- **Which client may be asked.** 2026-07-28: the request's own ``_meta`` client capabilities. The
  handshake revisions declare capabilities only in ``initialize``: when a client declares
  elicitation there, the answer carries an ``Mcp-Session-Id`` that *is* the declaration
  (``mcs1.<payload>.<HMAC-SHA256>`` under a key derived from the consent nonce secret, bound to
  the company, 24 h), echoed by the client on every later request. A tampered, foreign or old one
  reads as "no elicitation"; nothing else depends on it.
- **The question** is a ``mcp_elicitations`` row (migration 0115): the random id's SHA-256, the
  asking principal's key, the tool, the digest of its arguments, what resuming needs, and a
  lifetime of ``verbs_nonce_ttl`` (five minutes by default).
- **2026-07-28** (MRTR): the call answers ``resultType: input_required`` with the elicitation in
  ``inputRequests.confirm`` and the id as ``requestState``; the retry (same tool and arguments,
  same principal) spends the row once and resumes. A spent, expired or foreign state is HTTP 400
  ``-32602`` (``data.code`` ``consent_state_invalid``) and runs nothing.
- **2025-06-18 / 2025-11-25**: the call answers with a request-scoped SSE stream (MCP Streamable
  HTTP): an ``elicitation/create`` request whose JSON-RPC id is the random id, keep-alive
  comments, then the call's response. The client POSTs its answer as a JSON-RPC response (any
  replica: it is stored on the row, 202); the stream's replica polls the row, spends it once and
  resumes. A second answer to the same id is 409 and changes nothing. No answer within the
  lifetime, or a closed stream: the fallback (the escalation with ``continue_url``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from ..appkeys import CLOCK, DATABASE, SETTINGS
from ..commerce.confirm import confirm_as_shown
from ..db import tenant_tx
from ..htmlpage import new_token, token_hash
from ..jsonbody import dumps_compact
from ..verbs.consent import canonical_bytes
from ..verbs.decide import Call
from ..verbs.secret import load_nonce_secrets
from .jsonrpc import INVALID_PARAMS, INVALID_REQUEST, RpcError, error_response, success_response
from .mcp_consent import ELICITING_VERSIONS, Ask, accepted, declared_modes, elicitation_params, pick_mode
from .mcp_modern import MODERN_VERSIONS

__all__ = [
    "ASKED",
    "SESSION_HEADER",
    "Asked",
    "answer_post",
    "args_digest",
    "ask_person",
    "input_required",
    "is_response",
    "open_question",
    "resume_checkout",
    "resume_verb",
    "session_modes",
    "session_token",
    "spend_state",
    "stream_and_resume",
]

SESSION_HEADER = "Mcp-Session-Id"
_SESSION_TTL = 86_400
_POLL = 0.2  # seconds between reads of the row while a stream waits
_KEEPALIVE = 15.0
_SESSION_KEYS: dict[int, tuple[Any, bytes]] = {}  # id(settings) -> (settings, the session ids' HMAC key)
Resume = Callable[[Mapping[str, Any], str, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Asked:
    """What a ``tools/call`` left for its transport: the ask, who asked, the tool and its
    arguments, and ``resume(state, mode, answer) -> result`` (the call, continued)."""

    ask: Ask
    caller: str
    tool: str
    arguments: Mapping[str, Any]
    resume: Resume


ASKED = web.RequestKey("ucpgw.mcp_asked", Asked)  # the Asked of this request's tools/call, if any


def args_digest(arguments: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(dict(arguments))).hexdigest()


def _now(request: web.Request) -> datetime:
    return request.app[CLOCK].now()


# -- the handshake revisions' declaration, carried by the session id --------------------------------


def _session_key(app: web.Application) -> bytes:
    settings = app[SETTINGS]
    hit = _SESSION_KEYS.get(id(settings))
    if hit is not None and hit[0] is settings:
        return hit[1]
    kid, keys = load_nonce_secrets(settings)
    key = hmac.new(keys[kid], b"ucp-gateway mcp session v1", hashlib.sha256).digest()
    if len(_SESSION_KEYS) > 64:  # bounded: one entry per app's settings
        _SESSION_KEYS.clear()
    _SESSION_KEYS[id(settings)] = (settings, key)
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def session_token(app: web.Application, company_id: Any, modes: frozenset[str], version: str) -> str:
    """An ``Mcp-Session-Id`` that carries the elicitation modes a client declared at ``initialize``."""
    payload = _b64(dumps_compact({"c": str(company_id), "e": sorted(modes), "v": version, "t": int(time.time())}))
    mac = _b64(hmac.new(_session_key(app), payload.encode(), hashlib.sha256).digest())
    return f"mcs1.{payload}.{mac}"


def session_modes(app: web.Application, company_id: Any, value: str | None) -> frozenset[str]:
    """The modes a valid session id of this company declares; empty for anything else."""
    if not value or len(value) > 512 or value.count(".") != 2:
        return frozenset()
    tag, payload, mac = value.split(".")
    want = _b64(hmac.new(_session_key(app), payload.encode(), hashlib.sha256).digest())
    if tag != "mcs1" or not hmac.compare_digest(want, mac):
        return frozenset()
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return frozenset()
    if data.get("c") != str(company_id) or not 0 <= time.time() - int(data.get("t", 0)) < _SESSION_TTL:
        return frozenset()
    return frozenset(m for m in data.get("e") or () if m in ("form", "url"))


# -- the question's row ---------------------------------------------------------------------------------


async def open_question(request: web.Request, company_id: Any, asked: Asked, mode: str) -> tuple[str, dict]:
    """Store the question; returns its random id (shown to the client once) and the state stored
    (the ask's, its kind and mode, and ``rk``: the idempotency key suffix of the resumed call)."""
    token, now = new_token(), _now(request)
    state = {**asked.ask.state, "kind": asked.ask.kind, "mode": mode, "rk": secrets.token_hex(12)}
    ttl = request.app[SETTINGS].verbs_nonce_ttl
    async with tenant_tx(request.app[DATABASE].pool, company_id) as conn:
        await conn.execute(
            "INSERT INTO mcp_elicitations (company_id, id_hash, caller, tool, args_digest, state, created_at,"
            " expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            company_id, token_hash(token), asked.caller, asked.tool, args_digest(asked.arguments),
            state, now, now + timedelta(seconds=ttl),
        )  # fmt: skip
    return token, state


async def spend_state(
    request: web.Request, company_id: Any, token: Any, *, caller: str, tool: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """Spend a 2026-07-28 ``requestState`` once: the row of this caller, tool and arguments, unexpired
    and unspent. Returns its state. Raises RpcError (-32602, HTTP 400) otherwise, spending nothing."""
    row = None
    if isinstance(token, str) and 0 < len(token) <= 100:
        async with tenant_tx(request.app[DATABASE].pool, company_id) as conn:
            row = await conn.fetchrow(
                "UPDATE mcp_elicitations SET spent_at = $5 WHERE id_hash = $1 AND caller = $2 AND tool = $3"
                " AND args_digest = $4 AND spent_at IS NULL AND answer IS NULL AND expires_at > $5 RETURNING state",
                token_hash(token), caller, tool, args_digest(arguments), _now(request),
            )  # fmt: skip
    if row is None:
        raise RpcError(INVALID_PARAMS, "requestState is unknown, expired, already used, or not this call's",
                       {"code": "consent_state_invalid"}, http_status=400)  # fmt: skip
    return dict(row["state"])


def input_required(asked: Asked, mode: str, token: str) -> dict[str, Any]:
    """The 2026-07-28 ``InputRequiredResult`` of a question (MCP basic/patterns/mrtr)."""
    params = elicitation_params(asked.ask, mode, None)
    return {"resultType": "input_required", "requestState": token,
            "inputRequests": {"confirm": {"method": "elicitation/create", "params": params}}}  # fmt: skip


# -- the handshake revisions: a request-scoped SSE stream, the answer POSTed by the client -------------


def is_response(message: Any) -> bool:
    """A JSON-RPC response (the client's answer to our request): an id, a result or error, no method."""
    return (
        isinstance(message, dict)
        and "method" not in message
        and "id" in message
        and ("result" in message or "error" in message)
    )


async def answer_post(request: web.Request, company_id: Any, caller: str | None, message: dict) -> web.Response:
    """A client's answer to an ``elicitation/create`` (2025-06-18 / 2025-11-25), on any replica:
    stored once on its question (202); 409 for a question that is unknown, expired, answered or
    asked of another caller (an authenticated caller's question is answered by that caller only)."""
    rid = message.get("id")
    answer = message.get("result") if isinstance(message.get("result"), dict) else {"action": "cancel"}
    row = None
    if isinstance(rid, str) and rid.startswith("mel_") and len(rid) <= 100:
        async with tenant_tx(request.app[DATABASE].pool, company_id) as conn:
            row = await conn.fetchval(
                "UPDATE mcp_elicitations SET answer = $2, answered_at = $3 WHERE id_hash = $1 AND answer IS NULL"
                " AND spent_at IS NULL AND expires_at > $3 AND (caller = $4 OR ($4 IS NULL AND caller LIKE"
                " 'buyer:unverified:%')) RETURNING true",
                token_hash(rid[4:]), answer, _now(request), caller,
            )  # fmt: skip
    if row is None:
        err = RpcError(INVALID_REQUEST, "no open question with this id", {"code": "consent_state_invalid"})
        return web.json_response(error_response(None, err), status=409)
    return web.Response(status=202)


def _event(message: Mapping[str, Any]) -> bytes:
    return b"event: message\ndata: " + dumps_compact(message) + b"\n\n"


async def _wait_answer(request: web.Request, company_id: Any, token: str, resp: web.StreamResponse) -> Any:
    """Poll the question until it is answered (then spend it: the answer, once) or expires (None)."""
    pool, h = request.app[DATABASE].pool, token_hash(token)
    last_beat = asyncio.get_running_loop().time()
    while True:
        async with tenant_tx(pool, company_id) as conn:
            row = await conn.fetchrow(
                "UPDATE mcp_elicitations SET spent_at = $2 WHERE id_hash = $1 AND answer IS NOT NULL"
                " AND spent_at IS NULL RETURNING answer",
                h, _now(request),
            )  # fmt: skip
            if row is not None:
                return row["answer"]
            alive = await conn.fetchval(
                "SELECT true FROM mcp_elicitations WHERE id_hash = $1 AND spent_at IS NULL AND expires_at > $2",
                h, _now(request),
            )  # fmt: skip
        if not alive:
            return None
        loop_now = asyncio.get_running_loop().time()
        if loop_now - last_beat >= _KEEPALIVE:
            await resp.write(b": waiting for the person\n\n")  # raises once the client went away
            last_beat = loop_now
        await asyncio.sleep(_POLL)


async def stream_and_resume(
    request: web.Request, company_id: Any, asked: Asked, mode: str, request_id: Any,
    on_error: Callable[[Exception], RpcError],
) -> web.StreamResponse:  # fmt: skip
    """Answer the call with an SSE stream: the question, then (answered or not) the call's response."""
    token, state = await open_question(request, company_id, asked, mode)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                       "X-Accel-Buffering": "no"})  # fmt: skip
    await resp.prepare(request)
    question = {"jsonrpc": "2.0", "id": f"mel_{token}", "method": "elicitation/create",
                "params": elicitation_params(asked.ask, mode, f"mel_{token}")}  # fmt: skip
    await resp.write(_event(question))
    answer = await _wait_answer(request, company_id, token, resp)
    try:
        result = await asked.resume(state, mode, answer)
        out = success_response(request_id, result)
    except Exception as exc:  # the transport boundary, as jsonrpc.handle_payload
        out = error_response(request_id, on_error(exc))
    await resp.write(_event(out))
    await resp.write_eof()
    return resp


# -- which answer the call gets ------------------------------------------------------------------------


def _modes_of(request: web.Request, company_id: Any, version: str | None, message: Any) -> frozenset[str]:
    if version is None:
        return frozenset()
    if version in MODERN_VERSIONS:
        params = message.get("params") if isinstance(message, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        caps = meta.get("io.modelcontextprotocol/clientCapabilities") if isinstance(meta, dict) else None
        return declared_modes(caps, version)
    known = ELICITING_VERSIONS.get(version, frozenset())
    return session_modes(request.app, company_id, request.headers.get(SESSION_HEADER)) & known


async def ask_person(
    request: web.Request, company_id: Any, version: str | None, message: Any,
    on_error: Callable[[Exception], RpcError],
) -> web.StreamResponse | dict[str, Any] | None:  # fmt: skip
    """When this request's ``tools/call`` left an :class:`Asked` and the client declared a mode it
    allows: the SSE stream (handshake revisions; the client must accept ``text/event-stream``) or
    the ``input_required`` result (2026-07-28). None: the call's own answer (the fallback) stands."""
    asked: Asked | None = request.get(ASKED)
    if asked is None or not isinstance(message, dict) or message.get("id") is None:
        return None
    mode = pick_mode(asked.ask, _modes_of(request, company_id, version, message))
    if mode is None:
        return None
    if version in MODERN_VERSIONS:
        token, _ = await open_question(request, company_id, asked, mode)
        return input_required(asked, mode, token)
    if "text/event-stream" not in request.headers.get("Accept", ""):
        return None
    return await stream_and_resume(request, company_id, asked, mode, message["id"], on_error)


RunTool = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


def _with_key(arguments: Mapping[str, Any], key: str) -> dict[str, Any]:
    meta = arguments.get("meta") if isinstance(arguments.get("meta"), Mapping) else {}
    return {**arguments, "meta": {**meta, "idempotency-key": key}}


async def resume_checkout(
    request: web.Request, company_id: Any, arguments: Mapping[str, Any], run_tool: RunTool,
    state: Mapping[str, Any], mode: str, answer: Any,
) -> Mapping[str, Any]:  # fmt: skip
    """Continue a ``complete_checkout`` that asked the buyer. Yes in form mode: the checkout is
    confirmed as it was shown (commerce.confirm.confirm_as_shown; a changed checkout is not), then
    completed under a fresh idempotency key (the first key keeps the escalation it answered). Yes
    in url mode: the person acted on the page; a checkout they completed there is answered as it
    is, else it is completed (the page's confirmation lets it through, or it escalates again). No
    (declined, cancelled, a wrong form, no answer): the checkout as it stands, escalation and all."""
    cid = str(state.get("checkout_id"))
    read = {"meta": arguments.get("meta"), "id": cid}
    yes = accepted("checkout", state, mode, answer)
    if yes is None:
        return await run_tool("get_checkout", read)
    if mode == "form":
        async with tenant_tx(request.app[DATABASE].pool, company_id) as conn:
            why = await confirm_as_shown(conn, company_id, cid, str(state.get("digest")), now=_now(request))
        if why:
            return await run_tool("get_checkout", read)
    else:
        current = await run_tool("get_checkout", read)
        if current.get("status") in ("completed", "canceled"):
            return current
    key = f"{str(state.get('key') or '')[:90]}~{state.get('rk')}"
    return await run_tool("complete_checkout", _with_key(arguments, key))


async def resume_verb(
    arguments: Mapping[str, Any], dispatch: Callable[[Call], Awaitable[Mapping[str, Any]]],
    state: Mapping[str, Any], mode: str, answer: Any,
) -> Mapping[str, Any]:  # fmt: skip
    """Continue a verb call that asked for a click or a typed phrase: yes runs it with the answer
    (the typed phrase against the nonce the dispatcher issued, single use); no asks again without
    running it (the pending envelope)."""
    verb, args = str(state.get("verb")), dict(arguments)
    key = state.get("key") if isinstance(state.get("key"), str) else None
    yes = accepted("verb", state, mode, answer)
    if yes is None:
        return await dispatch(Call(verb, args, False, None, None, key))
    nonce = state.get("nonce") if isinstance(state.get("nonce"), str) else None
    return await dispatch(Call(verb, args, True, yes.get("typed_phrase"), nonce, key))

"""Tool-name mapping and the JSON-RPC 2.0 layer (pure)."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ucp_gateway.errors import BadRequest, Conflict, GatewayError, ServiceUnavailable, Unauthorized
from ucp_gateway.transports import jsonrpc
from ucp_gateway.transports.jsonrpc import RpcError, handle_payload, rpc_error_from_gateway
from ucp_gateway.transports.names import NameNotPortable, from_tool_name, is_portable, to_tool_name

segment = st.from_regex(r"[a-z][a-z0-9]{0,5}(_[a-z0-9]{1,4}){0,2}", fullmatch=True)


@given(st.lists(segment, min_size=1, max_size=3))
def test_tool_name_round_trip(parts):
    name = ".".join(parts)[:60]
    try:
        tool = to_tool_name(name)
    except NameNotPortable:
        assert "_." in name or name.endswith(("_", ".")) or "__" in name
        return
    assert is_portable(tool) and "." not in tool
    assert from_tool_name(tool) == name
    assert from_tool_name(name) == name  # a dotted name is accepted as is


def test_tool_name_examples_and_refusals():
    assert to_tool_name("customer.full_context") == "customer__full_context"
    assert to_tool_name("crm_contacts_search") == "crm_contacts_search"
    assert to_tool_name("customer.full_context", sanitize=False) == "customer.full_context"
    for bad in ("a__b", "a_.b", "a._b", "x." + "y" * 70, "1abc", "a-b"):
        with pytest.raises(NameNotPortable):
            to_tool_name(bad)


async def _echo(req):
    if req.params == {"boom": True}:
        raise RuntimeError("secret stack detail")
    if req.params == {"gw": True}:
        raise Conflict("key reused")
    if req.params == {"rpc": True}:
        raise RpcError(jsonrpc.INVALID_PARAMS, "bad params")
    return {"echo": req.params}


METHODS = {"echo": _echo}


async def run(body, allow_batch=False):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await handle_payload(raw, METHODS, allow_batch=allow_batch)


async def test_request_response_and_ids():
    out = await run({"jsonrpc": "2.0", "id": 7, "method": "echo", "params": {"a": 1}})
    assert out.http_status == 200 and out.body == {"jsonrpc": "2.0", "id": 7, "result": {"echo": {"a": 1}}}
    out = await run({"jsonrpc": "2.0", "id": "x-1", "method": "echo"})
    assert out.body["id"] == "x-1"


async def test_notification_gets_no_body():
    out = await run({"jsonrpc": "2.0", "method": "echo"})
    assert out.body is None and out.http_status == 202
    out = await run({"jsonrpc": "2.0", "method": "notifications/unknown"})
    assert out.body is None and out.http_status == 202


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        ({"jsonrpc": "1.0", "id": 1, "method": "echo"}, -32600),
        ({"jsonrpc": "2.0", "id": 1}, -32600),
        ({"jsonrpc": "2.0", "id": True, "method": "echo"}, -32600),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "echo"}, -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": 3}, -32600),
        ("just a string", -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": "nope"}, -32601),
        ({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"rpc": True}}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"boom": True}}, -32603),
        ({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"gw": True}}, -32000),
    ],
)
async def test_errors(body, code):
    out = await run(body)
    assert out.body["jsonrpc"] == "2.0" and out.body["error"]["code"] == code
    assert "result" not in out.body
    assert "secret stack detail" not in json.dumps(out.body) and "Traceback" not in json.dumps(out.body)


async def test_error_keeps_id_when_readable():
    out = await run({"jsonrpc": "1.0", "id": 5, "method": "echo"})
    assert out.body["id"] == 5
    out = await run({"jsonrpc": "2.0", "id": 5, "method": "nope"})
    assert out.body["id"] == 5


async def test_batches_per_protocol_revision():
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"n": 1}},
        {"jsonrpc": "2.0", "method": "echo"},
        {"jsonrpc": "2.0", "id": 2, "method": "nope"},
        {"bad": 1},
    ]
    refused = await run(batch, allow_batch=False)
    assert refused.body["error"]["code"] == -32600 and refused.http_status == 400
    out = await run(batch, allow_batch=True)
    assert [r.get("id") for r in out.body] == [1, 2, None]
    assert out.body[0]["result"] == {"echo": {"n": 1}}
    assert out.body[1]["error"]["code"] == -32601 and out.body[2]["error"]["code"] == -32600
    empty = await run([], allow_batch=True)
    assert empty.body["error"]["code"] == -32600
    only_notes = await run([{"jsonrpc": "2.0", "method": "echo"}], allow_batch=True)
    assert only_notes.body is None and only_notes.http_status == 202
    assert jsonrpc.batch_allowed(None) and jsonrpc.batch_allowed("2025-03-26")
    assert not jsonrpc.batch_allowed("2025-06-18") and not jsonrpc.batch_allowed("2025-11-25")


async def test_a_batch_is_bounded_and_yields_between_requests():
    """Regression (security review): a batch had no bound (1 MiB of tools/list asked for ~540 MB of
    answer) and ran every request without yielding, so a handler that never awaits held the loop."""
    item = {"jsonrpc": "2.0", "id": 1, "method": "echo"}
    full = await run([item] * jsonrpc.MAX_BATCH, allow_batch=True)
    assert full.http_status == 200 and len(full.body) == jsonrpc.MAX_BATCH
    over = await run([item] * (jsonrpc.MAX_BATCH + 1), allow_batch=True)
    assert over.http_status == 400 and over.body["error"]["code"] == -32600
    assert over.body["error"]["message"] == f"a batch holds at most {jsonrpc.MAX_BATCH} requests"
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    before = ticks
    await run([item] * jsonrpc.MAX_BATCH, allow_batch=True)  # _echo never awaits
    t.cancel()
    assert ticks - before >= jsonrpc.MAX_BATCH - 1


class _Err(GatewayError):
    def __init__(self, code, status):
        super().__init__("m", code=code)
        self.http_status = status  # type: ignore[misc]


@pytest.mark.parametrize(
    ("exc", "code", "status"),
    [
        (_Err("digest_mismatch", 400), -32600, 400),
        (_Err("algorithm_unsupported", 400), -32600, 400),
        (_Err("invalid_profile_url", 400), -32001, 400),
        (_Err("profile_unreachable", 424), -32001, 424),
        (_Err("version_unsupported", 422), -32001, 422),
        (Unauthorized("x"), -32000, 401),
        (_Err("profile_not_trusted", 403), -32000, 403),
        (Conflict("x"), -32000, 409),
        (_Err("rate_limited", 429), -32000, 429),
        (ServiceUnavailable("x"), -32000, 503),
        (BadRequest("x"), -32602, 400),
        (_Err("payload_too_large", 413), -32600, 413),
        (GatewayError("x"), -32603, 500),
    ],
)
def test_ucp_error_mapping(exc, code, status):
    err = rpc_error_from_gateway(exc)
    assert (err.code, err.http_status) == (code, status)
    assert err.data["code"] == (exc.code if code != -32603 else "internal_error")
    if status in (429, 503):
        assert err.data["retry_after"] == 1

"""mediatype.read_json_object over a real aiohttp server: the admin API's small JSON bodies."""

from __future__ import annotations

from aiohttp import web

from ucp_gateway.errors import GatewayError
from ucp_gateway.mediatype import json_response, read_json_object


async def _handler(request: web.Request) -> web.Response:
    try:
        return json_response({"got": await read_json_object(request, example='{"reason": "..."}')})
    except GatewayError as exc:
        return json_response(exc.to_body(), status=exc.http_status)


async def test_read_json_object_answers(aiohttp_client):
    app = web.Application()
    app.router.add_post("/", _handler)
    client = await aiohttp_client(app)

    async def post(data: bytes, ctype: str = "application/json"):
        r = await client.post("/", data=data, headers={"Content-Type": ctype})
        return r.status, await r.json()

    assert await post(b"") == (200, {"got": {}})  # an empty body is an empty object
    assert await post(b'{"reason": "x"}') == (200, {"got": {"reason": "x"}})
    status, body = await post(b"[1]")
    assert (status, body["content"]) == (400, 'body must be a JSON object, e.g. {"reason": "..."}')
    status, body = await post(b'{"a": "\\u0000"}')
    assert status == 400 and body["content"].startswith("body must be JSON: "), body
    status, body = await post(b'{"a": 1}', "text/plain")
    assert (status, body["code"]) == (415, "unsupported_media_type")

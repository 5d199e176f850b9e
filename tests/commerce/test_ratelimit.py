"""The buyer rate limit on the bindings: one budget across the workers of a real ``serve --workers
2``, verified agents' own budgets, unsigned callers' shared one, spent before any profile fetch
(the shared limiter itself: tests/access/test_shared_limits.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess

from ..test_cli import CLI, _free_port
from ..test_workers import _events, _wait_for
from .conftest import Platform, agent, headers, make_app, new_key, started, url
from .sigutil import BuyerKey

# --- end to end: serve --workers 2 ----------------------------------------------------------------

LIMIT = 6


class _Conn:
    """One keep-alive HTTP/1.1 connection (responses with Content-Length, as the gateway's)."""

    def __init__(self, port: int):
        self.port = port

    async def open(self) -> _Conn:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def get(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}", *(f"{k}: {v}" for k, v in headers.items())]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        body = await self.reader.readexactly(int(fields.get("content-length", 0)))
        return int(head[0].split()[1]), fields, body

    def close(self) -> None:
        self.writer.close()


async def test_serve_workers_share_one_budget(tmp_path, db_settings, database, company, platform):
    """Regression: each worker of ``serve --workers N`` had its own limiter, so a buyer whose
    connections landed on k workers got k times ``buyer_rate_limit`` (12 of 12 allowed here). Under
    signature policy ``off`` every caller is anonymous: one budget for the company."""
    log = tmp_path / "serve.log"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
    env |= {
        "DATABASE_URL": db_settings.database_url,
        "UCPGW_ENVIRONMENT": "development",  # the company's signature policy "off" holds, http profiles
        "UCPGW_PUBLIC_SCHEME": "http",
        "UCPGW_DEV_PROFILE_HOSTS": '["127.0.0.1"]',
        "UCPGW_KEYS_DIR": str(tmp_path / "keys"),
        "UCPGW_WEBHOOK_WORKER": "false",
        "UCPGW_DB_POOL_MAX": "2",
        "UCPGW_LOG_LEVEL": "info",  # one access-log line per request, tagged with the worker
        "UCPGW_BUYER_RATE_LIMIT": str(LIMIT),
    }
    args = [*CLI, "serve", "--workers", "2", "--port", str(port), "--data-dir", str(tmp_path / "gw")]
    with log.open("w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env)
    conns: list[_Conn] = []
    try:
        await asyncio.to_thread(_wait_for, log, proc, lambda e: e.get("event") == "listening" and e.get("workers"))
        # the supervisor may say so before the last worker accepts (a busy machine): wait for each
        for w in (0, 1):
            await asyncio.to_thread(_wait_for, log, proc, lambda e, w=w: e.get("event") == "listening"
                                    and e.get("worker") == w)  # fmt: skip
        # keep-alive connections until each worker holds two (a 404 names the connection in the log)
        on: dict[int, list[_Conn]] = {0: [], 1: []}
        for n in range(60):
            conn = await _Conn(port).open()
            path = f"/which-worker-{n}"
            assert (await conn.get(path, {}))[0] == 404
            hit = await asyncio.to_thread(_wait_for, log, proc, lambda e, p=path: e.get("path") == p, 10)
            conns.append(conn)
            on[hit["worker"]].append(conn)
            if all(len(c) >= 2 for c in on.values()):
                break
        assert all(len(c) >= 2 for c in on.values()), {w: len(c) for w, c in on.items()}
        chosen = on[0][:2] + on[1][:2]
        # one buyer agent: 6 requests on each of the 4 connections, at once (12 per worker)
        h = {"UCP-Agent": f'profile="{agent("limited")}"'}

        async def send(conn: _Conn) -> list[tuple[int, dict[str, str], bytes]]:
            return [await conn.get(url("/checkout-sessions/chk_nope"), h) for _ in range(LIMIT)]

        answers = [a for out in await asyncio.gather(*(send(c) for c in chosen)) for a in out]
    finally:
        for conn in conns:
            conn.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    statuses = [s for s, _, _ in answers]
    allowed = statuses.count(200)
    # the shared bucket grants each token once (a lease of 1 at this limit): exactly the limit
    assert allowed == LIMIT, f"{allowed} of {len(statuses)} allowed; the limit is {LIMIT} across both workers"
    assert set(statuses) == {200, 429}, statuses
    for status, fields, body in answers:
        if status == 429:
            assert json.loads(body)["code"] == "rate_limited"
            assert 1 <= int(fields["retry-after"]) <= 60
    served = {e["worker"] for e in _events(log) if e.get("event") == "request" and e.get("path", "").endswith("nope")}
    assert served == {0, 1}
    assert proc.returncode == 0, log.read_text()[-2000:]


async def test_verified_agents_have_their_own_budgets_unsigned_callers_share_one(
    aiohttp_client, database, db_settings, company, platform
):
    """Under signature policy ``optional``: each verified buyer agent (its profile URL, proven by
    its signature) has ``buyer_rate_limit`` of its own; every unsigned caller, whatever profile it
    names, counts against one shared budget, which never touches a verified agent's."""
    from ucp_gateway.db import tenant_tx

    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'optional' WHERE id = $1", company.id)
    key = BuyerKey()
    signer = await Platform(signing_keys=[dict(key.jwk)]).start()
    try:
        app = make_app(database, db_settings, buyer_rate_limit=2, public_scheme="http")
        c = await started(aiohttp_client, app, database, company)
        path = url("/checkout-sessions/co_missing")

        async def signed(profile: str) -> int:
            h = key.sign("GET", str(c.make_url(path)), {"UCP-Agent": f'profile="{signer.base}/profile/{profile}.json"'})
            return (await c.get(path, headers=h)).status

        async def unsigned(profile: str) -> int:
            return (await c.get(path, headers=headers(agent(profile)))).status

        assert [await signed("a") for _ in range(3)] == [200, 200, 429]
        assert [await signed("b") for _ in range(3)] == [200, 200, 429]  # another verified agent
        # unsigned callers: one budget between them, untouched by the verified agents' use
        assert [await unsigned("x"), await unsigned("y"), await unsigned("z")] == [200, 200, 429]
        # Regression (security review): the budget was taken after negotiation, so each refused
        # request naming a new profile still made the gateway fetch that profile, and one whose
        # fetch failed was not counted. Now a spent budget answers before any fetch, on both bindings.
        hits = platform.profile_hits
        assert [await unsigned(f"new{i}") for i in range(5)] == [429] * 5
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "get_checkout",
                "arguments": {"meta": {"ucp-agent": {"profile": agent("mcp")}}, "id": "x"},
            },
        }
        r = await c.post("/ucp/mcp", json=call, headers={"Accept": "application/json, text/event-stream"})
        body = await r.json()
        assert r.status == 429 and body["id"] == 7 and body["error"]["data"]["code"] == "rate_limited", body
        assert platform.profile_hits == hits
        # Regression (security review): the generic verb doors spent no budget at all, and every call
        # appended an audit row: the MCP generic tools and the stdio bridge's anonymous reads
        call["params"] = {"name": "capability__manifest", "arguments": {"meta": {"ucp-agent": {"profile": agent("g")}}}}
        r = await c.post("/ucp/mcp", json=call, headers={"Accept": "application/json, text/event-stream"})
        assert r.status == 429 and (await r.json())["error"]["data"]["code"] == "rate_limited"
        r = await c.post(
            "/api/v1/agent/dispatch",
            json={"verb": "capability.manifest", "args": {}},
            headers={"Verb-Surface": "mcp_stdio"},
        )
        body = await r.json()
        assert r.status == 429 and body["error"]["reason"] == "rate_limited" and int(r.headers["Retry-After"]) >= 1
        # a verified agent's budget is its own on those doors too (and the same one as on REST)
        mine = f"{signer.base}/profile/c.json"
        call["params"]["arguments"]["meta"]["ucp-agent"]["profile"] = mine

        async def signed_tool() -> int:
            raw = json.dumps(call).encode()
            h = {"UCP-Agent": f'profile="{mine}"', "Content-Type": "application/json", "Idempotency-Key": new_key()}
            h = key.sign("POST", str(c.make_url("/ucp/mcp")), h, raw)
            r = await c.post("/ucp/mcp", data=raw, headers={**h, "Accept": "application/json, text/event-stream"})
            return r.status

        assert await signed("c") == 200  # one of its two on REST
        assert [await signed_tool(), await signed_tool()] == [200, 429]
    finally:
        await signer.runner.cleanup()

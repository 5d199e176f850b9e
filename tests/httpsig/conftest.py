"""A small app with the signature middleware and key admin routes, a real local profile server,
and companies on real PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiohttp import web

from ucp_gateway import httpsig
from ucp_gateway.appkeys import CLOCK, DATABASE, REQ_PRINCIPAL, REQ_RAW_BODY, SETTINGS
from ucp_gateway.clock import FrozenClock
from ucp_gateway.httpsig.admin_web import add_routes
from ucp_gateway.keys import KekRing
from ucp_gateway.keys import web as keys_web
from ucp_gateway.tenancy import create_company

from .signer import new_key


@dataclass
class Env:
    client: object
    app: web.Application
    clock: FrozenClock
    company: object
    profile_url: str
    key: object
    jwk: dict
    profile: dict


async def echo(request: web.Request) -> web.Response:
    p = request.get(REQ_PRINCIPAL)
    sig = request.get(httpsig.REQ_SIGNATURE)
    return web.json_response(
        {
            "role": getattr(p, "role", None),
            "authenticated": getattr(p, "authenticated", None),
            "kid": sig.kid if sig else None,
            "raw_len": len(request[REQ_RAW_BODY]),
            "raw_hex": request[REQ_RAW_BODY][:8].hex(),
            "decoded_len": len(httpsig.decoded_body(request)),
        }
    )


async def complete(request: web.Request) -> web.Response:
    httpsig.mark_for_signing(request)
    return web.json_response({"id": "chk_1", "status": "completed"})


def make_app(settings, database, clock) -> web.Application:
    app = web.Application(handler_args={"auto_decompress": False})  # as create_app does
    app[SETTINGS] = settings
    app[DATABASE] = database
    app[CLOCK] = clock
    httpsig.setup(app)
    add_routes(app)  # the admin API of blocks, purges and the signature debugger
    keys_web.setup(app)
    app.router.add_route("*", "/checkout-sessions", echo)
    app.router.add_route("*", "/checkout-sessions/{id}", echo)
    app.router.add_route("*", "/.well-known/ucp", echo)
    app.router.add_route("*", "/{tail:.*}", echo)
    app.router.add_post("/checkout-sessions/{id}/complete", complete)
    return app


@pytest.fixture
async def profile_server(aiohttp_server):
    """A real platform-profile server on 127.0.0.1 whose ``signing_keys`` tests can change."""
    state = {"profile": {"ucp": {"version": "2026-04-08"}, "signing_keys": []}, "hits": 0}

    async def profile(request):
        state["hits"] += 1
        return web.json_response(state["profile"])

    app = web.Application()
    app.router.add_get("/profile.json", profile)
    server = await aiohttp_server(app, host="127.0.0.1")
    state["url"] = str(server.make_url("/profile.json"))
    return state


@pytest.fixture
async def env(db_settings, database, aiohttp_client, profile_server):
    settings = db_settings.model_copy(update={"kek_ring": KekRing.new_entry("kek-1")})
    from pydantic import SecretStr

    settings.kek_ring = SecretStr(settings.kek_ring)
    clock = FrozenClock()
    company = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["shop.example"])
    priv, jwk = new_key()
    profile_server["profile"]["signing_keys"] = [jwk]
    app = make_app(settings, database, clock)
    client = await aiohttp_client(app)
    return Env(client, app, clock, company, profile_server["url"], priv, jwk, profile_server)

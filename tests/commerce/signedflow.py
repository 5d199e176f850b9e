"""The signed buyer flow the end-to-end tests share: a shop whose signature policy is ``required``
(the production default), requests signed by a buyer platform's own key (RFC 9421, with
``Accept-Signature`` asking for a signed answer), the order webhooks delivered by a real worker to
the platform's profile endpoint, and their signatures verified against the shop's published key.

Fixtures ``shop`` and ``buyer`` are imported by the test modules that use them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest

from ucp_gateway.commerce.webhooks import WebhookWorker, _default_signer, profile_target_resolver
from ucp_gateway.db import tenant_tx
from ucp_gateway.discovery import ProfileFetcher
from ucp_gateway.keys import ensure_active_key

from .conftest import Platform, make_app
from .sigutil import BuyerKey, Msg, verify_with_jwk

# what the shop's webhook signature covers (UCP order "Webhook Signature Verification")
WEBHOOK_COMPONENTS = ("@method", "@authority", "@path", "content-digest", "content-type", "ucp-agent")


class _Clock:
    def now(self):
        return datetime.now(UTC)


@pytest.fixture
async def buyer():
    """A 2026-04-08 buyer platform with one P-256 key, serving its profile on 127.0.0.1."""
    key = BuyerKey()
    p = await Platform(signing_keys=[dict(key.jwk)]).start()
    p.key = key
    yield p
    await p.runner.cleanup()


@pytest.fixture
async def shop(aiohttp_client, database, db_settings, company):
    """The demo company behind a test client, signatures required, its signing key active."""
    async with tenant_tx(database.pool, company.id) as conn:
        await conn.execute("UPDATE companies SET signature_policy = 'required' WHERE id = $1", company.id)
    # the shop's first key was made at seed time under the test's dev KEK ring, which the app loads too
    client = await aiohttp_client(make_app(database, db_settings, public_scheme="http"))
    await ensure_active_key(database.pool, company.id, now=datetime.now(UTC))
    return client


async def signed(client, buyer, method: str, url: str, body: dict | None = None, key: str | None = None):
    """``method url`` (a path or a URL of the shop) signed with ``buyer.key``; the response carries
    ``sent`` (the request as signed, a :class:`sigutil.Msg`) for verifying a signed answer."""
    raw = json.dumps(body).encode() if body is not None else b""
    h = {"UCP-Agent": f'profile="{buyer.base}/profile/a.json"'}
    if body is not None:
        h["Content-Type"] = "application/json"
    if key:
        h["Idempotency-Key"] = key
    path = urlsplit(url).path
    full = str(client.make_url(path))
    h = buyer.key.sign(method, full, h, raw)
    h["Accept-Signature"] = 'sig1=("@status" "content-digest" "content-type")'  # ours is signed instead
    r = await client.request(method, path, data=raw or None, headers=h)
    r.sent = Msg(method, full, h, raw)
    return r


def signature_kid(headers) -> str:
    """The ``keyid`` of the (single) signature in ``Signature-Input``."""
    return headers["Signature-Input"].split('keyid="')[1].split('"')[0]


async def deliver_webhooks(database, db_settings) -> int:
    """Run one pass of a real webhook worker (http profile hosts on 127.0.0.1 allowed, as the
    platforms here serve plain http); the number of deliveries made."""
    settings = db_settings.model_copy(update={"dev_profile_hosts": ["127.0.0.1"]})
    fetcher = ProfileFetcher(settings)
    worker = WebhookWorker(
        database.pool, settings, _Clock(), signer=_default_signer, resolve_target=profile_target_resolver(fetcher)
    )
    try:
        return await worker.run_once()
    finally:
        await worker.close()
        await fetcher.close()


def verify_webhook(buyer, headers, body: bytes, shop_keys: dict) -> None:
    """The delivery's signature verifies with the shop key it names and covers the webhook components."""
    verify_with_jwk(
        Msg("POST", buyer.base + "/webhooks", headers, body), shop_keys[signature_kid(headers)], WEBHOOK_COMPONENTS
    )

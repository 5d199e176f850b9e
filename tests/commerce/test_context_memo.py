"""build_context shares the request-independent shop part only between requests with the same inputs."""

from __future__ import annotations

import uuid

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from ucp_gateway.appkeys import CLOCK, SETTINGS
from ucp_gateway.clock import SystemClock
from ucp_gateway.commerce.context import Negotiation, build_context
from ucp_gateway.config import Settings
from ucp_gateway.tenancy import Company


def _request(settings: Settings, host: str = "shop.example") -> web.Request:
    app = web.Application()
    app[SETTINGS] = settings
    app[CLOCK] = SystemClock()
    return make_mocked_request("POST", "/ucp/v1/checkout-sessions", headers={"Host": host}, app=app)


def _company(commerce: dict | None) -> Company:
    return Company(uuid.uuid4(), "s", "Shop", "starter", "optional", (), {"commerce": commerce} if commerce else {})


def test_same_inputs_share_the_shop_and_other_inputs_do_not():
    settings = Settings(database_url="postgresql://unused/x")
    plain = _company(None)
    pickup = _company({"pickup_locations": [{"id": "p1", "name": "Main St"}], "currency": "EUR"})
    neg_a = Negotiation("https://a.example/p", {"dev.ucp.shopping.checkout": [{"version": "2026-04-08"}]}, None, None)
    neg_b = Negotiation("https://b.example/p", None, None, "https://b.example/hook")

    a1 = build_context(_request(settings), plain, "https://a.example/p", neg_a)
    a2 = build_context(_request(settings), plain, "https://a.example/p", neg_a)
    assert a1.shop is a2.shop and a1.order_ucp is a2.order_ucp  # memoised
    assert a1.shop.ucp["capabilities"] == {"dev.ucp.shopping.checkout": [{"version": "2026-04-08"}]}

    b = build_context(_request(settings), plain, "https://b.example/p", neg_b)
    assert b.shop is not a1.shop and "dev.ucp.shopping.fulfillment" in b.shop.ucp["capabilities"]
    assert b.webhook_url == "https://b.example/hook" and a1.webhook_url is None

    other_host = build_context(_request(settings, "other.example"), plain, "https://a.example/p", neg_a)
    assert other_host.shop.base_url == "https://other.example" != a1.shop.base_url

    p = build_context(_request(settings), pickup, "https://a.example/p", neg_a)
    assert [x.id for x in p.pickup_locations] == ["p1"] and p.currency == "EUR" and a1.pickup_locations == ()

    vendor = settings.model_copy(update={"vendor_prefix": "dev.other"})
    v = build_context(_request(vendor), plain, "https://a.example/p", neg_a)
    assert list(v.shop.ucp["payment_handlers"]) == ["dev.other.mock_payment"] != list(a1.shop.ucp["payment_handlers"])
    # per-request facts are never shared
    assert a1.caller == "https://a.example/p" and b.caller == "https://b.example/p"


def test_build_context_sets_ttl_currency_and_limit_and_is_frozen():
    import dataclasses

    settings = Settings(database_url="postgresql://unused/x", checkout_ttl=3600)
    for company, neg in (
        (_company(None), None),
        (_company({"currency": "EUR", "buyer_max_order_amount": 5000}), Negotiation("https://p/x", None, None, "u")),
    ):
        got = build_context(_request(settings), company, "https://p/x", neg)
        assert got.ttl.total_seconds() == 3600 and got.last_write is None
        assert got.currency == (company.settings.get("commerce") or {}).get("currency", "USD")
        assert got.max_order_amount == (5000 if neg else settings.buyer_max_order_amount)
        assert got.webhook_url == (neg.webhook_url if neg else None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.caller = "other"  # type: ignore[misc]

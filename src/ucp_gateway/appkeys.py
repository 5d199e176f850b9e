"""Typed keys for application and request storage ("No Singletons Please", aiohttp web_advanced).

Everything long-lived hangs off the ``web.Application`` under one of these keys; per-request values
live on the request under the ``web.RequestKey`` keys below.
"""

from __future__ import annotations

from aiohttp import web

from .clock import Clock
from .config import Settings
from .db import Database

__all__ = ["CLOCK", "DATABASE", "REQ_COMPANY", "REQ_PRINCIPAL", "REQ_RAW_BODY", "REQ_REQUEST_ID", "SETTINGS"]

SETTINGS = web.AppKey("settings", Settings)
CLOCK = web.AppKey("clock", Clock)  # type: ignore[type-abstract]
DATABASE = web.AppKey("database", Database)

# request storage keys (aiohttp >= 3.14 web.RequestKey)
REQ_REQUEST_ID = web.RequestKey("request_id", str)
REQ_COMPANY = web.RequestKey("company", object)  # tenancy.Company, or None for the platform node
REQ_RAW_BODY = web.RequestKey("raw_body", bytes)  # the body exactly as received
REQ_PRINCIPAL = web.RequestKey("principal", object)  # who is calling (set by the auth layers)

"""Typed keys for application and request storage ("No Singletons Please", aiohttp web_advanced).

Everything long-lived hangs off the ``web.Application`` under one of these keys; per-request values
live on the request under the string keys below (aiohttp 3.x request storage).
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

# request storage keys (values: str, tenancy.Company | None, bytes, principal object)
REQ_REQUEST_ID = "ucpgw.request_id"
REQ_COMPANY = "ucpgw.company"
REQ_RAW_BODY = "ucpgw.raw_body"
REQ_PRINCIPAL = "ucpgw.principal"

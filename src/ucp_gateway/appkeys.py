"""Typed keys for application and request storage ("No Singletons Please", aiohttp web_advanced).

Everything long-lived hangs off the ``web.Application`` under one of these keys; per-request values
live on the request under the ``web.RequestKey`` keys below.
"""

from __future__ import annotations

from aiohttp import web

from .clock import Clock
from .config import Settings
from .db import Database

__all__ = [
    "CLOCK",
    "DATABASE",
    "REQ_COMPANY",
    "REQ_PRINCIPAL",
    "REQ_RAW_BODY",
    "REQ_REQUEST_ID",
    "SETTINGS",
    "human_page",
    "is_human_page",
    "is_open_door",
    "open_door",
]

SETTINGS = web.AppKey("settings", Settings)
CLOCK = web.AppKey("clock", Clock)  # type: ignore[type-abstract]
DATABASE = web.AppKey("database", Database)

# request storage keys (aiohttp >= 3.14 web.RequestKey)
REQ_REQUEST_ID = web.RequestKey("request_id", str)
REQ_COMPANY = web.RequestKey("company", object)  # tenancy.Company, or None for the platform node
REQ_RAW_BODY = web.RequestKey("raw_body", bytes)  # the body exactly as received
REQ_PRINCIPAL = web.RequestKey("principal", object)  # who is calling (set by the auth layers)


_HUMAN_PAGE = "ucpgw_human_page"


def human_page(handler):
    """Mark an aiohttp route handler as a page for people (read-only HTML, such as a checkout's
    ``continue_url``): the signature layer asks no RFC 9421 signature of it, as it asks none on
    ``httpsig_exempt_prefixes``. A browser cannot sign; agents' operations never use these handlers.
    Returns: ``handler``."""
    setattr(handler, _HUMAN_PAGE, True)
    return handler


def is_human_page(handler) -> bool:
    """True for a handler marked with :func:`human_page`."""
    return getattr(handler, _HUMAN_PAGE, False) is True


_OPEN_DOOR = "ucpgw_open_door"


def open_door(handler):
    """Mark a route handler that authorises each call itself (the UCP MCP endpoint: its discovery
    methods need no credentials, its tool calls apply the access levels): the signature layer lets an
    unsigned request through to it as an anonymous caller, whatever the company's signature policy,
    and still verifies a signature that is present (a wrong one is refused, never downgraded).
    Returns: ``handler``."""
    setattr(handler, _OPEN_DOOR, True)
    return handler


def is_open_door(handler) -> bool:
    """True for a handler marked with :func:`open_door`."""
    return getattr(handler, _OPEN_DOOR, False) is True

"""Structured JSON logging (structlog) with the request id bound on every line.

``configure_logging(settings)`` is called once by the CLI; the foundation middleware sets the request id
in :data:`REQUEST_ID_VAR` (one ContextVar, cheaper per request than ``structlog.contextvars`` binding)
and :func:`add_request_id` puts it on every line; other ``structlog.contextvars`` bindings still merge.
Never log secrets, private keys, tokens or card data: log identifiers (kid, audit_id, request_id), not material.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import Any

import structlog

from .config import Settings

__all__ = ["REQUEST_ID_VAR", "add_request_id", "configure_logging", "get_logger"]

#: The current request's id (set and reset by the foundation middleware; None outside a request).
REQUEST_ID_VAR: ContextVar[str | None] = ContextVar("ucpgw_request_id", default=None)


def add_request_id(logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: ``request_id`` first on the line while a request is handled (an explicit
    ``request_id=`` keyword wins), as ``structlog.contextvars.merge_contextvars`` placed it."""
    rid = REQUEST_ID_VAR.get()
    if rid is None or "request_id" in event_dict:
        return event_dict
    return {"request_id": rid, **event_dict}


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(settings: Settings, *, stream=None) -> None:
    """Route structlog and stdlib logging to ``stream`` (default stderr) as JSON lines (or console)."""
    level = _LEVELS[settings.log_level]
    renderer = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_request_id,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=stream or sys.stderr),  # one write per line
        cache_logger_on_first_use=False,
    )
    # stdlib loggers (aiohttp, asyncio, pgserver) at warning and above, as plain lines on stderr
    logging.basicConfig(level=max(level, logging.WARNING), stream=stream or sys.stderr, force=True)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)

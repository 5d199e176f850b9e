"""Structured JSON logging (structlog) with the request id bound on every line.

``configure_logging(settings)`` is called once by the CLI; the foundation middleware sets the request id
in :data:`REQUEST_ID_VAR` (one ContextVar, cheaper per request than ``structlog.contextvars`` binding)
and :func:`add_request_id` puts it on every line; other ``structlog.contextvars`` bindings still merge.
Never log secrets, private keys, tokens or card data: log identifiers (kid, audit_id, request_id), not material.

Lines of stdlib loggers (aiohttp, asyncio, pgserver, modules using ``logging``) go through the same
renderer (structlog's ``ProcessorFormatter``), with ``logger`` naming their source. aiohttp's
"Error handling request" for a request its HTTP parser refused (no Host, two Host lines, a malformed
request line: a 4xx before any handler runs) is an expected client error, not a fault: it becomes one
``bad_http_request`` warning without a traceback (:func:`quiet_client_errors`).
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import Any

import structlog
from aiohttp.http_exceptions import HttpProcessingError

from .config import Settings

__all__ = ["REQUEST_ID_VAR", "add_request_id", "configure_logging", "get_logger", "quiet_client_errors"]

#: The current request's id (set and reset by the foundation middleware; None outside a request).
REQUEST_ID_VAR: ContextVar[str | None] = ContextVar("ucpgw_request_id", default=None)


def add_request_id(logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: ``request_id`` first on the line while a request is handled (an explicit
    ``request_id=`` keyword wins), as ``structlog.contextvars.merge_contextvars`` placed it."""
    rid = REQUEST_ID_VAR.get()
    if rid is None or "request_id" in event_dict:
        return event_dict
    return {"request_id": rid, **event_dict}


def quiet_client_errors(logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor for stdlib records (``ProcessorFormatter`` foreign chain, after the level):
    a record carrying an aiohttp ``HttpProcessingError`` with a 4xx status, which aiohttp's server logs
    with a traceback when its parser refuses a request (aiohttp 3.x ``RequestHandler.handle_error``),
    becomes ``{"event": "bad_http_request", "status", "reason", "remote"}`` at warning level (debug
    stays debug) without ``exc_info``. Every record loses ``positional_args`` (read here for the remote).
    """
    args = event_dict.pop("positional_args", ())
    exc_info = event_dict.get("exc_info")
    exc = exc_info[1] if isinstance(exc_info, tuple) and len(exc_info) == 3 else None
    if not isinstance(exc, HttpProcessingError) or not 400 <= (exc.code or 0) < 500:
        return event_dict
    del event_dict["exc_info"]
    event_dict["event"] = "bad_http_request"
    event_dict["status"] = exc.code
    event_dict["reason"] = str(exc.message)[:300]  # the parser's words (client bytes are repr-escaped)
    if args:
        event_dict["remote"] = str(args[0])
    if event_dict.get("level") != "debug":
        event_dict["level"] = "warning"
    return event_dict


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(settings: Settings, *, stream=None) -> None:
    """Route structlog and stdlib logging to ``stream`` (default stderr) as JSON lines (or console),
    at ``settings.log_level`` (stdlib loggers at warning and above)."""
    level = _LEVELS[settings.log_level]
    renderer = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_request_id,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=stream or sys.stderr),  # one write per line
        cache_logger_on_first_use=False,
    )
    # stdlib loggers (aiohttp, asyncio, pgserver) at warning and above, rendered as structlog's lines
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.contextvars.merge_contextvars,
                add_request_id,
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                stamp,
                quiet_client_errors,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
            pass_foreign_args=True,  # the remote address of aiohttp's parser errors (quiet_client_errors)
        )
    )
    logging.basicConfig(level=max(level, logging.WARNING), handlers=[handler], force=True)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)

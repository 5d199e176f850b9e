"""Structured JSON logging (structlog) with the request id bound on every line.

``configure_logging(settings)`` is called once by the CLI; request handlers get the request id bound
through ``structlog.contextvars`` by the request-id middleware. Never log secrets, private keys,
tokens or card data: log identifiers (kid, audit_id, request_id), not material.
"""

from __future__ import annotations

import logging
import sys

import structlog

from .config import Settings

__all__ = ["configure_logging", "get_logger"]

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
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    # stdlib loggers (aiohttp, asyncio, pgserver) at warning and above, as plain lines on stderr
    logging.basicConfig(level=max(level, logging.WARNING), stream=stream or sys.stderr, force=True)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)

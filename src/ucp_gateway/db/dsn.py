"""Small DSN helpers (libpq URI form) built on ``urllib.parse``."""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

from ..errors import ConfigError

__all__ = ["check_dsn", "with_database", "with_user"]


def check_dsn(dsn: str, *, name: str = "DATABASE_URL") -> str:
    """Validate a ``postgresql://`` URI; returns it unchanged. ``name``: the setting, for the message.
    Raises ConfigError (no secrets echoed)."""
    try:
        parts = urlsplit(dsn)
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise ConfigError(f"{name} is malformed (expected postgresql://user:pass@host:port/db)") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"{name} must start with postgresql://")
    return dsn


def with_user(dsn: str, user: str, password: str | None = None) -> str:
    """The same DSN with another user (and password, or none)."""
    p = urlsplit(dsn)
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if p.port:
        host = f"{host}:{p.port}"
    cred = quote(user, safe="")
    if password:
        cred += ":" + quote(password, safe="")
    return urlunsplit((p.scheme, f"{cred}@{host}", p.path, p.query, p.fragment))


def with_database(dsn: str, database: str) -> str:
    """The same DSN pointing at another database."""
    p = urlsplit(dsn)
    return urlunsplit((p.scheme, p.netloc, "/" + quote(database, safe=""), p.query, p.fragment))

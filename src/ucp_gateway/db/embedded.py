"""The embedded PostgreSQL server (``pgserver``), used when no ``DATABASE_URL`` is configured.

Data lives under ``<data_dir>/pg`` and survives restarts. :func:`stop_embedded` stops the server so
that no postgres process is left behind (pgserver also registers an ``atexit`` hook as a backstop).
The server listens only on a Unix socket: no TCP port is opened.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["start_embedded", "stop_embedded"]


def _check_writable(data_dir: Path) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"data dir {data_dir} is not writable: {exc.strerror or exc}") from None


def _start(data_dir: Path) -> Any:
    _check_writable(data_dir)
    # pgserver keeps its lock file in the user runtime dir; give it a private one when none is set
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"ucpgw-runtime-{os.getuid()}"))  # noqa: S108
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, exist_ok=True)
    import pgserver  # heavy import (psutil, platformdirs); only when embedded is used

    try:
        return pgserver.get_server(str((data_dir / "pg").resolve()), cleanup_mode="stop")
    except Exception as exc:  # pgserver raises CalledProcessError/TimeoutExpired/AssertionError
        log = data_dir / "pg" / "log"
        tail = log.read_text(errors="replace")[-400:] if log.exists() else ""
        raise ConfigError(f"embedded PostgreSQL failed to start in {data_dir / 'pg'}: {exc!s}. {tail}") from None


async def start_embedded(data_dir: Path) -> tuple[Any, str]:
    """Start (or attach to) the embedded server under ``data_dir``.

    Returns: ``(server_handle, owner_dsn)``; the DSN points at the ``postgres`` database over the socket.
    Raises: ConfigError when the directory is unwritable or the server does not start.
    """
    server = await asyncio.to_thread(_start, data_dir)
    return server, server.get_uri()


async def stop_embedded(server: Any) -> None:
    """Stop the embedded server if this process holds the last handle (pgserver's handle counting)."""
    await asyncio.to_thread(server.cleanup)

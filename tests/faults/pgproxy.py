"""A Unix-socket relay in front of the test PostgreSQL: cutting it is a database outage.

``await relay.cut()`` closes the listening socket (new connections: ``FileNotFoundError`` /
``ConnectionRefusedError``, as when the server is gone) and every relayed session (a query in
flight: ``ConnectionDoesNotExistError``); ``await relay.restore()`` listens again. Real sockets and
the real server on both sides: only the path between them is broken.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def socket_of(dsn: str) -> Path:
    """The Unix socket file a ``postgresql://...?host=/dir`` DSN connects to (port 5432 unless given)."""
    parts = urlsplit(dsn)
    host = dict(parse_qsl(parts.query))["host"]
    return Path(host) / f".s.PGSQL.{parts.port or 5432}"


def via(dsn: str, socket_dir: Path) -> str:
    """``dsn`` with its socket directory replaced by ``socket_dir``."""
    parts = urlsplit(dsn)
    query = dict(parse_qsl(parts.query))
    query["host"] = str(socket_dir)
    return urlunsplit(parts._replace(query=urlencode(query)))


class Relay:
    def __init__(self, target: Path, socket_dir: Path):
        self.target = target
        self.path = socket_dir / target.name
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def restore(self) -> None:
        self._server = await asyncio.start_unix_server(self._session, path=str(self.path))

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.path.unlink(missing_ok=True)
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_unix_connection(str(self.target))
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_w))

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            w.transport.abort()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
        self._writers.difference_update((writer, up_w))

"""The application pool's connection class: the server reset only when a session may carry state.

asyncpg's pool resets every released connection with one extra round trip
(``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;``). The gateway's units of
work keep all their state in the transaction (``set_config(..., true)``, transaction-level
advisory locks, asyncpg's portals), so for them that round trip undoes nothing. Skipping it is
safe only if no statement on the connection could have left *session* state behind, so
:class:`GatewayConnection` decides per release, failing closed:

- every query text that goes through the connection's public query methods is classified once
  (memoised) by :func:`leaves_session_state`: session ``SET``/``RESET``, ``set_config`` whose
  third argument is not the literal ``true``, session advisory locks, ``LISTEN``, ``DECLARE`` /
  ``WITH HOLD`` cursors, ``PREPARE``, temporary tables, ``DO`` blocks, ``DISCARD``, ``LOAD``;
  anything that matches marks the connection until its next server reset (an explicitly prepared
  statement or cursor is checked when it is made; asyncpg refuses to use either after release);
- the server reset also runs when the connection is released inside a transaction (asyncpg
  rolls it back first), or with client-side listeners registered.

Only then does :meth:`GatewayConnection.reset` skip the server round trip. Server-side functions
are not scanned: tests/db/test_pool_reset.py checks that no function of our migrations sets
session state.

The class also lets :func:`.tenant.tenant_tx` set the tenant context in the round trip of
``BEGIN`` (:meth:`GatewayConnection.after_begin`), and run one read right after ``COMMIT`` in the
round trip of the ``COMMIT`` (:meth:`GatewayConnection.after_commit`, :class:`.tenant.CommitProbe`).
"""

from __future__ import annotations

import re
from typing import Any

import asyncpg

from .outage import DatabaseUnavailable

__all__ = ["GatewayConnection", "leaves_session_state"]

_CLIENT_SIDE = (asyncpg.InterfaceError, asyncpg.InternalClientError)

_STMT_START = re.compile(r"\s*(?:SET|RESET|LISTEN|UNLISTEN|DECLARE|PREPARE|DO|DISCARD|LOAD)\b", re.I)
_ANYWHERE = re.compile(r"pg_(?:try_)?advisory_lock|\bLISTEN\b|\bWITH\s+HOLD\b|\bTEMP(?:ORARY)?\b", re.I)
# each branch of _ANYWHERE contains one of these (PostgreSQL's keywords are ASCII): a cheap prefilter
_ANYWHERE_NEEDLES = ("advisory_lock", "listen", "hold", "temp")
_SET_LOCAL = re.compile(r"\s*SET\s+LOCAL\b", re.I)
_SET_CONFIG = re.compile(r"set_config\"?\s*\(", re.I)
_SET_CONFIG_LOWER = re.compile(r"set_config\"?\s*\(")  # on lower-cased ASCII text: a fast literal search
# the common local call: two plain literals (or a parameter) and the literal true
_LOCAL_CALL = re.compile(r"\s*'[^']*'\s*,\s*(?:'[^']*'|\$\d+)\s*,\s*true\s*\)", re.I)
_CACHE_MAX = 4096
_verdicts: dict[str, bool] = {}


def _strip_comments(sql: str) -> str:
    if "--" not in sql and "/*" not in sql:
        return sql
    return re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S)


def _set_config_is_local(sql: str, start: int) -> bool:
    """True when the set_config call opening at ``start`` (just after its ``(``) ends with the
    literal third argument ``true``."""
    return _LOCAL_CALL.match(sql, start) is not None or _parse_set_config_is_local(sql, start)


def _parse_set_config_is_local(sql: str, start: int) -> bool:
    """:func:`_set_config_is_local` for any call: its arguments split at top-level commas."""
    depth, args, cur, i, quote = 1, [], [], start, None
    while i < len(sql):
        ch = sql[i]
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == "(":
            depth += 1
            cur.append(ch)
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(cur))
                return len(args) == 3 and args[2].strip().lower() == "true"
            cur.append(ch)
        elif ch == "," and depth == 1:
            args.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    return False


def _classify(sql: str) -> bool:
    """The verdict of :func:`leaves_session_state`. Statements start at the text's start and after
    every ``;``; the prefilters only skip regexes that cannot match, so the verdict is that of the
    regexes alone (tests/db/test_pool_reset.py compares them)."""
    text = _strip_comments(sql)
    low = text.lower()
    if any(n in low for n in _ANYWHERE_NEEDLES) and _ANYWHERE.search(text):
        return True
    for part in text.split(";"):
        if _STMT_START.match(part) and not _SET_LOCAL.match(part):
            return True
    if "set_config" not in low:
        return False
    # lower() keeps offsets only for ASCII text
    calls = _SET_CONFIG_LOWER.finditer(low) if text.isascii() else _SET_CONFIG.finditer(text)
    return any(not _set_config_is_local(text, m.end()) for m in calls)


def leaves_session_state(sql: str) -> bool:
    """Whether ``sql`` could leave session-level state on the connection (conservative: a false
    positive only costs the server reset). Memoised per query text."""
    v = _verdicts.get(sql)
    if v is None:
        v = _classify(sql)
        if len(_verdicts) >= _CACHE_MAX:
            _verdicts.clear()
        _verdicts[sql] = v
    return v


class GatewayConnection(asyncpg.Connection):
    """asyncpg connection of the application pool (``create_pool(connection_class=...)``)."""

    __slots__ = ("_ucpgw_after_begin", "_ucpgw_after_commit", "_ucpgw_commit_status", "_ucpgw_session_state")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._ucpgw_session_state = False
        self._ucpgw_after_begin: str | None = None
        self._ucpgw_after_commit: str | None = None
        self._ucpgw_commit_status: str | None = None

    def _see(self, query: Any) -> None:
        if not isinstance(query, str) or leaves_session_state(query):
            self._ucpgw_session_state = True

    # ---- every public way to send SQL passes its text through _see -----------------------
    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:  # noqa: ASYNC109 (asyncpg's API)
        tail = self._ucpgw_after_begin
        if tail is not None and not args and query.startswith("BEGIN"):
            self._ucpgw_after_begin = None
            query = query + " " + tail
        elif self._ucpgw_after_commit is not None and not args and query == "COMMIT;":  # asyncpg's commit text
            query, self._ucpgw_after_commit = "COMMIT; " + self._ucpgw_after_commit, None
            self._see(query)
            try:
                self._ucpgw_commit_status = status = await super().execute(query, timeout=timeout)
            except _CLIENT_SIDE as exc:
                self._raise_if_lost(exc)
                raise
            return status
        self._see(query)
        try:
            return await super().execute(query, *args, timeout=timeout)
        except _CLIENT_SIDE as exc:
            self._raise_if_lost(exc)
            raise

    async def executemany(self, command: str, args: Any, *, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self._see(command)
        try:
            return await super().executemany(command, args, timeout=timeout)
        except _CLIENT_SIDE as exc:
            self._raise_if_lost(exc)
            raise

    async def fetch(self, query: str, *args: Any, **kw: Any) -> list:
        self._see(query)
        try:
            return await super().fetch(query, *args, **kw)
        except _CLIENT_SIDE as exc:
            self._raise_if_lost(exc)
            raise

    async def fetchrow(self, query: str, *args: Any, **kw: Any) -> Any:
        self._see(query)
        try:
            return await super().fetchrow(query, *args, **kw)
        except _CLIENT_SIDE as exc:
            self._raise_if_lost(exc)
            raise

    async def fetchval(self, query: str, *args: Any, **kw: Any) -> Any:
        self._see(query)
        try:
            return await super().fetchval(query, *args, **kw)
        except _CLIENT_SIDE as exc:
            self._raise_if_lost(exc)
            raise

    async def fetchmany(self, query: str, args: Any, **kw: Any) -> list:
        self._see(query)
        try:
            return await super().fetchmany(query, args, **kw)
        except _CLIENT_SIDE as exc:
            self._raise_if_lost(exc)
            raise

    async def prepare(self, query: str, **kw: Any) -> Any:
        self._see(query)
        try:
            return await super().prepare(query, **kw)
        except _CLIENT_SIDE as exc:
            self._raise_if_lost(exc)
            raise

    def cursor(self, query: str, *args: Any, **kw: Any) -> Any:
        self._see(query)
        return super().cursor(query, *args, **kw)

    async def copy_from_query(self, query: str, *args: Any, **kw: Any) -> Any:
        self._see(query)
        try:
            return await super().copy_from_query(query, *args, **kw)
        except _CLIENT_SIDE as exc:
            self._raise_if_lost(exc)
            raise

    def _raise_if_lost(self, exc: BaseException) -> None:
        """Raise DatabaseUnavailable (from ``exc``) when the connection is closed: asyncpg's
        client-side errors on a connection the server dropped ("connection is closed", "another
        operation is in progress" from a protocol left mid-operation) are an outage, not a bug."""
        if self.is_closed():
            raise DatabaseUnavailable() from exc

    # ---- release --------------------------------------------------------------------------------
    def after_begin(self, sql: str | None) -> None:
        """Append ``sql`` (a constant or validated text, never raw input) to the next ``BEGIN`` that
        asyncpg's ``transaction()`` sends, so it runs in the same round trip; None cancels."""
        self._ucpgw_after_begin = sql

    def begin_consumed(self) -> bool:
        """True when the ``after_begin`` text went out with ``BEGIN`` (and is no longer pending)."""
        return self._ucpgw_after_begin is None

    def after_commit(self, sql: str | None) -> None:
        """Send ``sql`` (one read-only statement of constant or validated text, never raw input) in
        the round trip of the next ``COMMIT`` that asyncpg's ``transaction()`` sends; it runs after
        the commit, in its own implicit transaction, and its command status (``SELECT <rows>``) is
        then :meth:`commit_status`. None cancels. If the ``COMMIT`` fails the statement does not run."""
        self._ucpgw_after_commit = sql
        self._ucpgw_commit_status = None

    def commit_status(self) -> str | None:
        """The command status of the :meth:`after_commit` statement (None: it did not run)."""
        return self._ucpgw_commit_status

    def needs_server_reset(self) -> bool:
        """Whether releasing this connection must run the server reset query."""
        return bool(
            self._ucpgw_session_state
            or self.is_in_transaction()
            or self._top_xact is not None
            or self._listeners
            or self._log_listeners
        )

    async def reset(self, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Called by the pool on release: asyncpg's full reset when :meth:`needs_server_reset`,
        else nothing (no round trip)."""
        self._ucpgw_after_begin = self._ucpgw_after_commit = None
        if self.needs_server_reset():
            await super().reset(timeout=timeout)
            self._ucpgw_session_state = False

"""Time as an injected dependency: the core never reads the clock itself.

``Clock.now()`` returns a timezone-aware UTC ``datetime``. Tests use :class:`FrozenClock` and move it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "FrozenClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> datetime:
        """Current time, timezone-aware UTC."""
        ...


class SystemClock:
    """The real wall clock (UTC)."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FrozenClock:
    """A controllable clock for tests: starts at ``start`` (UTC) and moves only by :meth:`advance`."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 4, 8, 12, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("FrozenClock needs a timezone-aware datetime")

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        """Move forward by a ``timedelta`` or a number of seconds; returns the new time."""
        self._now += delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        return self._now

    def set(self, when: datetime) -> None:
        self._now = when

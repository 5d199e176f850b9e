"""HTTP caching helpers, pure: Cache-Control TTLs (RFC 9111 §5.2) and strong ETags (RFC 9110 §8.8.3)."""

from __future__ import annotations

import hashlib
import re

__all__ = ["cache_ttl", "etag_matches", "make_etag", "max_age"]

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d{1,10})\"?\s*(?:,|$)", re.IGNORECASE)


def max_age(cache_control: str | None) -> int | None:
    """The ``max-age`` of a Cache-Control value in seconds, or None when absent or invalid."""
    if not cache_control:
        return None
    m = _MAX_AGE.search(cache_control)
    return int(m.group(1)) if m else None


def cache_ttl(cache_control: str | None, *, floor: float, cap: float) -> float:
    """How long (s) to keep a fetched platform profile.

    UCP overview "Fetching": cache for at least ``floor`` (60 s) whatever the origin says, and honour
    a longer ``max-age`` up to ``cap``. ``no-store``/``no-cache`` therefore still get the floor.
    """
    age = max_age(cache_control) or 0
    return float(min(cap, max(floor, age)))


def make_etag(body: bytes) -> str:
    """A strong entity tag for ``body``: the quoted first 32 hex digits of its SHA-256."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 §13.1.2: ``If-None-Match`` uses the weak comparison, so ``W/"x"`` matches ``"x"``;
    ``*`` matches any current representation."""
    if not if_none_match:
        return False
    value = if_none_match.strip()
    if value == "*":
        return True
    for tag in value.split(","):
        tag = tag.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == etag:
            return True
    return False

"""Opaque keyset cursors: one encoding for every paginated listing (the verb manifest's LIST wave;
the agent graph's cursor is the same base64url form, see ``discovery.builder``).

A cursor is the base64url (RFC 4648 §5, no padding) of the UTF-8 key of the last item on a page.
Decoding is strict, so junk is refused instead of silently restarting or ending the listing: the
text must be canonical base64url (what :func:`encode_cursor` writes, nothing else) of a non-empty
printable UTF-8 key of at most ``max_length`` characters (no NUL, controls or lone surrogates).
"""

from __future__ import annotations

import base64
import binascii
import re

from .errors import BadRequest

__all__ = ["decode_cursor", "encode_cursor"]

_B64URL = re.compile(r"[A-Za-z0-9_-]+")


def encode_cursor(key: str) -> str:
    """Opaque cursor for the page after ``key`` (base64url of its UTF-8, unpadded)."""
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, *, max_length: int = 200) -> str:
    """Inverse of :func:`encode_cursor`: the key the cursor was made from.

    Args:
        cursor: as received (a query parameter or a verb argument).
        max_length: the longest key (characters) the listing can have.

    Raises:
        BadRequest: ``invalid_cursor`` (400) for anything :func:`encode_cursor` cannot have written.
    """
    bad = BadRequest("invalid cursor", code="invalid_cursor")
    if not isinstance(cursor, str) or len(cursor) > 4 * max_length or not _B64URL.fullmatch(cursor):
        raise bad
    try:
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None
    if not key or len(key) > max_length or not key.isprintable() or encode_cursor(key) != cursor:
        raise bad
    return key

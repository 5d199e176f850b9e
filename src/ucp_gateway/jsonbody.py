"""Strict JSON for request bodies (what the gateway accepts is what PostgreSQL can store), and the
fast compact encoder of response bodies (:func:`dumps_compact`).

``json.loads`` accepts three things that later fail deep inside a handler: NaN/Infinity (not JSON,
RFC 8259 §6), strings with U+0000 or an unpaired surrogate (valid JSON escapes that text/jsonb and
UTF-8 cannot hold), and nesting deep enough to raise RecursionError. :func:`loads_strict` refuses
all of them up front, so a bad body is a 400 at the transport and never a 500/503 from the database.
"""

from __future__ import annotations

import json
import math
from typing import Any

try:  # about 30x faster than the json module's encoder on response bodies
    import orjson
except ImportError:  # pragma: no cover - a dependency; the json module stays the reference
    orjson = None

__all__ = [
    "DUPLICATE_NAME",
    "MAX_DEPTH",
    "NOT_UTF8",
    "TOO_DEEP",
    "InvalidJson",
    "TooDeep",
    "db_dumps",
    "db_loads",
    "dumps_compact",
    "loads_strict",
]

#: Deepest nesting accepted (objects + arrays). UCP documents nest well under 20 levels.
MAX_DEPTH = 64


class InvalidJson(ValueError):
    """The body is not acceptable JSON; the message says why (safe to show to the caller)."""


def _reject_constant(name: str) -> Any:
    raise InvalidJson(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    # 1e400 is JSON's grammar but no double: it would be inf here, and null once stored (RFC 8259 §6)
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJson(f"number {text[:40]} is out of range")
    return value


def _bad_string(s: str) -> bool:
    if "\x00" in s:
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:  # an unpaired surrogate (\\ud800 ...)
        return True
    return False


def _plain(raw: bytes | str, max_depth: int) -> bool:
    """True when the text alone shows the decoded value passes every check below, so the walk over
    it can be skipped: no ``\\u`` escape and no NUL (U+0000 and lone surrogates are only reachable
    through those in valid JSON text), no surrogate in the text itself, and fewer opening brackets
    than ``max_depth`` + 1 (every nesting level needs one). Conservative: False just means "walk"."""
    if isinstance(raw, str):
        if "\\u" in raw or "\x00" in raw or raw.count("[") + raw.count("{") > max_depth:
            return False
        if raw.isascii():
            return True
        try:
            raw.encode("utf-8")  # strict: fails on a surrogate
        except UnicodeEncodeError:
            return False
        return True
    if b"\\u" in raw or b"\x00" in raw or raw.count(b"[") + raw.count(b"{") > max_depth:
        return False
    if raw.isascii():
        return True
    try:
        raw.decode("utf-8")  # strict: json.loads decodes with surrogatepass, this refuses surrogates
    except UnicodeDecodeError:
        return False
    return True


# one decoder for every body: json.loads(raw, parse_constant=...) builds a decoder per call
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)

#: The message of an object that names one member twice.
DUPLICATE_NAME = "body is not valid JSON: an object names a member twice (RFC 8259 §4; I-JSON, RFC 7493 §2.3)"


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise InvalidJson(DUPLICATE_NAME)
    return out


# the exact check, for a text whose count of ":" cannot rule duplicates out (see _no_duplicates)
_DECODER_UNIQUE = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_pairs
)


def _members(value: Any) -> int:
    """The number of object members in ``value`` (every nesting level)."""
    n, stack = 0, [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            n += len(node)
            stack.extend(v for v in node.values() if type(v) is dict or type(v) is list)
        elif type(node) is list:
            stack.extend(v for v in node if type(v) is dict or type(v) is list)
    return n


def _no_duplicates(raw: bytes | str, value: Any) -> bool:
    """True when the text ``raw`` of ``value`` provably names no member twice: each member of the
    text has one ``:`` after its name, and a repeated name leaves one member fewer in the decoded
    value, so when the text holds no more ``:`` than the value has members, none was repeated.
    False means "check exactly" (a ``:`` inside a string, such as a URL, or a repeated name)."""
    colons = raw.count(b":") if type(raw) is bytes else raw.count(":")  # type: ignore[arg-type]
    return colons <= _members(value)


_BOM_UTF8 = b"\xef\xbb\xbf"
#: The message of a body that is not UTF-8 or holds a NUL byte (RFC 8259 §8.1).
NOT_UTF8 = "body is not valid JSON: it must be UTF-8 text without NUL bytes (RFC 8259 §8.1; not UTF-16 or UTF-32)"


def _text(raw: bytes | str) -> str:
    """The text of ``raw`` as ``json.loads`` reads it (a str with a BOM refused), except that bytes
    must be UTF-8 (RFC 8259 §8.1): ``json.loads`` would also read UTF-16 and UTF-32, guessing from a
    BOM or the NUL pattern. An initial UTF-8 BOM is ignored (§8.1 allows it); UTF-8 encoded surrogates
    are decoded as ``json.loads`` does, for :func:`_check` to refuse. Raises: InvalidJson."""
    if isinstance(raw, str):
        if raw.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
        return raw
    if not isinstance(raw, (bytes, bytearray)):
        raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(raw).__name__}")
    # every JSON text has an ASCII character, which UTF-16/32 write with a NUL byte; a NUL is never
    # JSON in UTF-8 either (not whitespace, and a string holds U+0000 only as an escape)
    if b"\x00" in raw:
        raise InvalidJson(NOT_UTF8)
    try:
        return raw.decode("utf-8-sig" if raw.startswith(_BOM_UTF8) else "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise InvalidJson(NOT_UTF8) from None


def loads_strict(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Decode a request body (RFC 8259) and check every string and key.

    Args:
        raw: the body bytes (UTF-8, an initial BOM ignored) or text.
        max_depth: deepest accepted nesting of objects and arrays.
    Returns: the decoded value (dict, list, str, int, float, bool or None).
    Raises: InvalidJson (a ValueError) for malformed JSON, bytes that are not UTF-8 (UTF-16 and
        UTF-32 included, with or without a BOM: RFC 8259 §8.1) or hold a NUL byte, NaN/Infinity, a
        number out of the double range (1e400), nesting deeper than ``max_depth``, a string
        containing U+0000 or an unpaired surrogate, or an object naming a member twice (RFC 7493
        §2.3: parsers differ on which one wins, so a body could mean one thing to a proxy or a
        signer's tooling and another here).

    The json module is the reference; a plain text (:func:`_plain`, no 19-digit run) is read by
    orjson, which gives the same value for every such text it accepts (tests/test_jsonbody.py).
    """
    plain = type(raw) is bytes or type(raw) is str
    if plain and orjson is not None and _plain(raw, max_depth) and not _long_digits_any(raw):
        # a text _plain passes holds nothing the checks refuse; orjson reads it as the json module
        # does (same values; no BOM, big ints or bad UTF-8 reach it) and refuses some valid texts
        # (1e400, a UTF-8 BOM): those and every error go the reference way below
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if _no_duplicates(raw, value):
                return value
    try:
        text = _text(raw)
        value = _DECODER.decode(text)
        if not _no_duplicates(text, value):
            _DECODER_UNIQUE.decode(text)  # raises InvalidJson on a repeated name
    except InvalidJson:
        raise
    except RecursionError:
        raise InvalidJson("JSON nesting is too deep") from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidJson("body is not valid JSON") from None
    if not (plain and _plain(raw, max_depth)):
        _check(value, max_depth)
    return value


def _check(value: Any, max_depth: int) -> None:
    """Walk ``value``: raise InvalidJson for nesting deeper than ``max_depth`` or a bad string."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if _bad_string(node):
                raise InvalidJson("strings must not contain U+0000 or unpaired surrogates")
        elif isinstance(node, dict):
            if depth > max_depth:
                raise InvalidJson("JSON nesting is too deep")
            for k, v in node.items():
                if _bad_string(k):
                    raise InvalidJson("strings must not contain U+0000 or unpaired surrogates")
                stack.append((v, depth + 1))
        elif isinstance(node, list):
            if depth > max_depth:
                raise InvalidJson("JSON nesting is too deep")
            stack.extend((v, depth + 1) for v in node)


def _stdlib_compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _unsupported(value: Any) -> Any:
    raise TypeError(type(value).__name__)  # the json module decides (and words its error)


_ORJSON_OPTS = (
    orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
    if orjson is not None
    else 0
)


def dumps_compact(value: Any) -> bytes:
    """Compact UTF-8 JSON (RFC 8259) of a response body, the bytes of
    ``json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()``.

    orjson writes them when it can: for str keys, strings, ints within 64 bits, bools, None, lists,
    tuples and dicts the bytes are identical; finite floats are the same shortest round-trip value,
    spelled without a zero-padded exponent (``1e-05`` -> ``0.00001``); non-finite floats (which no
    request body can carry: loads_strict refuses NaN, Infinity and 1e400) become ``null``, valid
    JSON where the json module writes ``Infinity``. Anything else (int keys, big ints, subclasses,
    dataclasses, datetimes, lone surrogates) goes to the json module, so results and errors are its own.
    Raises: TypeError / ValueError / UnicodeEncodeError as the json module does.
    """
    if orjson is not None:
        try:
            return orjson.dumps(value, default=_unsupported, option=_ORJSON_OPTS)
        except TypeError:
            pass
    return _stdlib_compact(value)


def db_dumps(value: Any) -> str:
    """Text of a json/jsonb query parameter (the asyncpg codec's encoder; PostgreSQL parses it).

    The same JSON value as ``json.dumps(value)``, written by orjson when it can (the dumps_compact
    rules: spelling may differ, values do not); whatever orjson refuses goes to the json module, so
    results and errors are its own. Raises: TypeError / ValueError as the json module does.
    """
    if orjson is not None:
        try:
            return orjson.dumps(value, default=_unsupported, option=_ORJSON_OPTS).decode()
        except TypeError:
            pass
    return json.dumps(value)


# orjson reads integers beyond 64 bits as floats; any run of 19+ ASCII digits (every JSON integer
# literal that may not fit 64 bits) goes to the json module. Found with bytes.translate (digits to
# "0", all else to "a") and a substring search: a regex search costs ~20x more on a checkout body,
# and every jsonb value read goes through here.
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x61 for b in range(256))
_RUN_19 = b"0" * 19


def _long_digits(text: str) -> bool:
    """True when ``text`` holds 19 or more consecutive ASCII digits."""
    return _RUN_19 in text.encode("utf-8", "surrogatepass").translate(_DIGITS_TO_ZERO)


def _long_digits_any(raw: bytes | str) -> bool:
    """:func:`_long_digits` of a text or of UTF-8 bytes."""
    if type(raw) is str:
        return _long_digits(raw)
    return _RUN_19 in raw.translate(_DIGITS_TO_ZERO)


class TooDeep:
    """Stands for a json/jsonb value nested too deep for Python to decode (PostgreSQL keeps
    thousands of levels; a row an operator wrote by SQL). The gateway never writes one (request
    JSON is limited to 64 levels), so one such row fails where it is read, e.g. a company's
    settings as ``company_misconfigured``, instead of every query that returns it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TOO_DEEP"


TOO_DEEP = TooDeep()


def db_loads(text: str) -> Any:
    """Python value of a json/jsonb column (the asyncpg codec's decoder): ``json.loads(text)``.

    orjson decodes it unless the text has a run of 19 or more digits (a possible integer beyond 64
    bits, which orjson would turn into a float) or orjson refuses it (1e400, a lone surrogate
    escape, more than 1024 levels); then the json module does. Returns :data:`TOO_DEEP` for a value
    nested beyond Python's recursion limit. Raises: ValueError (json.JSONDecodeError) as json.loads.
    """
    if orjson is not None and not _long_digits(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(text)
    except RecursionError:  # a RecursionError inside asyncpg's decoder would fail the whole query
        return TOO_DEEP

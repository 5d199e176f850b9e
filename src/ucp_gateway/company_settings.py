"""Typed reads of ``companies.settings`` and the write-side check of its known sections.

``companies.settings`` is a JSON object owned by the subsystems (tenancy refuses a row whose
settings are no object). Its known sections, their types, and what a reader does with a wrong type
(a row written by an operator's SQL; :func:`check_settings` refuses it on the gateway's write paths)::

    path                             type                                         wrong type on read
    sign_responses                   boolean                                      read as true (sign)
    platform_listing                 boolean (default true)                       read as false (unlisted)
    verbs.daily_caps                 object: cap class -> 0..2**31-1 | null       capped verb calls refused
    commerce                         object                                       commerce API refused
    commerce.currency                ISO 4217 code (3 upper-case letters)         commerce API refused
    commerce.buyer_max_order_amount  integer >= 0 | null (no limit)               commerce API refused
    commerce.automatic_discounts     array of {id, title, type, value,            commerce API refused
                                     min_subtotal?}
    commerce.pickup_locations        array of {id, name, address?}                commerce API refused
    commerce.pages                   object: page name -> string                  absent (default text)
    access.levels                    object: operation -> access level            strictest table (levels.py)
    access.rate_limits               object: access level -> 1..10**7 (a minute)  the platform's limits

A JSON null, or a missing key, anywhere on a path is absent. "Refused" is :class:`CompanyMisconfigured`
(HTTP 500 ``company_misconfigured``, a JSON body naming the settings path) for the requests that
need the section; the company's other requests go on. Each fault is logged once per loaded row and
reader as ``company_settings_invalid`` (company id, slug, path, JSON type; never the value); settings
that are no object at all, by a directory listing (``tenancy.list_companies``), once per company
and 10 minutes per process.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol, TypeVar
from uuid import UUID

from .errors import BadRequest, ConfigError
from .jsonbody import TOO_DEEP
from .logs import get_logger

__all__ = [
    "KNOWN",
    "REFUSE",
    "CompanyMisconfigured",
    "SettingError",
    "access_levels",
    "boolean",
    "check_settings",
    "commerce",
    "daily_caps",
    "json_type",
    "pages",
    "rate_limits",
    "setting",
    "text",
]

T = TypeVar("T")
_log = get_logger("ucp_gateway.company_settings")
_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
_CURRENCY = re.compile(r"^[A-Z]{3}$")


class CompanyMisconfigured(ConfigError):
    """A company whose settings the gateway cannot serve (not a JSON object, or a section a reader
    needs has the wrong type): the requests that read them fail closed with this error (HTTP 500,
    ``{"code": "company_misconfigured", "content": ...}``)."""

    code = "company_misconfigured"


class SettingError(ValueError):
    """A settings value of the wrong type. ``path``: dotted, under ``settings``; ``expected``: what
    it must be, in words; ``value``: what it is; ``problem``: the phrase after the path when the
    value is no wrong type but a key that does not belong."""

    def __init__(self, path: str, expected: str, value: Any, problem: str | None = None):
        super().__init__(f"settings.{path} {problem or f'must be {expected}, not {_a(json_type(value))}'}")
        self.path, self.expected, self.value, self.problem = path, expected, value, problem


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value: ``object``, ``array``, ``string``, ``number``...;
    ``value nested too deep`` for one the database codec could not decode (jsonbody.TOO_DEEP)."""
    if value is TOO_DEEP:
        return "value nested too deep"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _a(kind: str) -> str:
    """``"an object"``, ``"a string"``, ``"null"``: a JSON type name in a sentence."""
    return kind if kind == "null" else ("an " if kind[0] in "aeiou" else "a ") + kind


# ---- parsers: (value, path) -> the value to use; raise SettingError. Never called with None. ----


def _object(value: Any, path: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise SettingError(path, "a JSON object", value)
    return value


def _count(value: Any, path: str, *, nullable: bool = False, most: int | None = None) -> int | None:
    """An integer >= 0 (a JSON boolean is no number here), at most ``most`` when given, or null when
    ``nullable``."""
    if value is None and nullable:
        return None
    if type(value) is not int or value < 0 or (most is not None and value > most):
        bounds = "an integer >= 0" if most is None else f"an integer from 0 to {most}"
        bounds += " or null" if nullable else ""
        # an integer out of range is a number, just not one of these: say which
        out_of_range = f"must be {bounds}, not {value}" if type(value) is int else None
        raise SettingError(path, bounds, value, out_of_range)
    return value


_CAP_MAX = 2**31 - 1  # verb_daily_usage.used is an int4: a larger cap failed every capped call


def _string(value: Any, path: str) -> str:
    if type(value) is not str:
        raise SettingError(path, "a string", value)
    return value


def boolean(value: Any, path: str) -> bool:
    """``true`` or ``false``."""
    if type(value) is not bool:
        raise SettingError(path, "true or false", value)
    return value


def text(value: Any, path: str) -> str:
    """A string."""
    return _string(value, path)


def daily_caps(value: Any, path: str) -> dict[str, int | None]:
    """An object of cap class -> integer 0..2**31-1 (0: class disabled) or null (unlimited). Any cap class
    name is taken (a verb may name its own); every value is checked, not only the known classes'."""
    caps = _object(value, path)
    for name, cap in caps.items():
        _count(cap, f"{path}.{name}", nullable=True, most=_CAP_MAX)
    return caps


_DISCOUNT_KEYS = frozenset({"id", "title", "type", "value", "min_subtotal"})


def _discount(value: Any, path: str) -> None:
    d = _object(value, path)
    extra = sorted(set(d) - _DISCOUNT_KEYS)
    if extra:  # a misspelt min_subtotal must not leave the discount without its minimum
        fields = "id, title, type, value, min_subtotal"
        raise SettingError(f"{path}.{extra[0]}", fields, d[extra[0]], f"is no field of a discount ({fields})")
    for key in ("id", "title"):
        _string(d.get(key), f"{path}.{key}")
    kind = d.get("type")
    if kind not in ("percentage", "fixed_amount"):
        raise SettingError(f"{path}.type", '"percentage" or "fixed_amount"', kind)
    amount = _count(d.get("value"), f"{path}.value")
    if kind == "percentage" and amount is not None and amount > 100:  # more than the subtotal
        raise SettingError(f"{path}.value", "a percentage of 0-100", amount)
    if d.get("min_subtotal") is not None:
        _count(d["min_subtotal"], f"{path}.min_subtotal")


def _pickup(value: Any, path: str) -> None:
    p = _object(value, path)
    for key in ("id", "name"):
        _string(p.get(key), f"{path}.{key}")
    if p.get("address") is not None:
        _object(p["address"], f"{path}.address")


def _array_of(check: Callable[[Any, str], Any]) -> Callable[[Any, str], list[Any]]:
    def parse(value: Any, path: str) -> list[Any]:
        if type(value) is not list:
            raise SettingError(path, "a JSON array", value)
        for i, item in enumerate(value):
            check(item, f"{path}[{i}]")
        return value

    return parse


def _currency(value: Any, path: str) -> str:
    if type(value) is not str or not _CURRENCY.match(value):
        raise SettingError(path, "an ISO 4217 currency code (3 upper-case letters)", value)
    return value


_COMMERCE: tuple[tuple[str, Callable[[Any, str], Any]], ...] = (
    ("currency", _currency),
    ("buyer_max_order_amount", lambda v, p: _count(v, p, nullable=True)),
    ("automatic_discounts", _array_of(_discount)),
    ("pickup_locations", _array_of(_pickup)),
)


def commerce(value: Any, path: str) -> dict[str, Any]:
    """The commerce section as the commerce API reads it: returned as it is (the same object, so
    per-object memos stay valid) once the keys that set prices, limits and offers check out
    (``currency``, ``buyer_max_order_amount`` (null: no limit), ``automatic_discounts``,
    ``pickup_locations``; null = absent, except the limit). ``pages`` is not checked: it is cosmetic."""
    cs = _object(value, path)
    for key, parse in _COMMERCE:
        v = cs.get(key)
        if v is not None:
            parse(v, f"{path}.{key}")
    return cs


def pages(value: Any, path: str) -> dict[str, Any]:
    """An object of page name (``terms``, ``privacy``) -> text (string or null)."""
    ps = _object(value, path)
    for name, body in ps.items():
        if body is not None:
            _string(body, f"{path}.{name}")
    return ps


def access_levels(value: Any, path: str) -> dict[str, Any]:
    """The access table: operation (``levels.OPERATIONS``) -> ``anonymous`` | ``identified`` |
    ``linked``; the defaults (``levels.DEFAULT_LEVELS``) with these entries applied."""
    from .levels import level_table

    entries = _object(value, path)
    for op, level in entries.items():
        if type(level) is not str:
            raise SettingError(f"{path}.{op}", "an access level name", level)
    try:
        return level_table(entries)
    except ValueError as exc:
        raise SettingError(path, "an access table", entries, f"is no access table: {exc}") from None


_RATE_MAX = 10**7


def rate_limits(value: Any, path: str) -> dict[str, int]:
    """An object of access level (``anonymous``, ``identified``, ``linked``) -> requests a minute,
    1..10**7; a null entry is absent (the platform's limit)."""
    entries = _object(value, path)
    out: dict[str, int] = {}
    for level, limit in entries.items():
        if level not in ("anonymous", "identified", "linked"):
            raise SettingError(f"{path}.{level}", "an access level (anonymous, identified, linked)", level,
                               "is no access level (anonymous, identified, linked)")  # fmt: skip
        if limit is not None:
            n = _count(limit, f"{path}.{level}", most=_RATE_MAX)
            if not n:
                raise SettingError(f"{path}.{level}", f"an integer from 1 to {_RATE_MAX}", limit)
            out[level] = n
    return out


# ---- reading -----------------------------------------------------------------------------------

REFUSE: Any = object()  #: ``on_bad`` of :func:`setting`: raise CompanyMisconfigured
_ABSENT = object()
# (id(settings), path) -> (settings, value or _ABSENT, error): one check (and one log line) per loaded
# row and path; the entry holds the settings object, so its id is not reused while the entry lives
_MEMO: dict[tuple[int, str], tuple[dict[str, Any], Any, SettingError | None]] = {}


def _walk(settings: dict[str, Any], path: str, parse: Callable[[Any, str], T]) -> T | Any:
    """The parsed value at dotted ``path`` (every step before the last must be an object), or
    _ABSENT when a key on the way is missing or null. Raises SettingError."""
    node: Any = settings
    parts = path.split(".")
    for i, name in enumerate(parts):
        if i:
            node = _object(node, ".".join(parts[:i]))
        node = node.get(name)
        if node is None:
            return _ABSENT
    return parse(node, path)


class SettingsOwner(Protocol):
    """What :func:`setting` reads of a company (``tenancy.Company`` is one): its settings object, and
    its id and slug for the error it logs. A protocol, so this module stays below tenancy."""

    @property
    def id(self) -> UUID: ...
    @property
    def slug(self) -> str: ...
    @property
    def settings(self) -> dict[str, Any] | None: ...


def setting(
    company: SettingsOwner, path: str, parse: Callable[[Any, str], T], *, default: T, on_bad: T | Any = REFUSE
) -> T:
    """The value at dotted ``path`` of ``company.settings``, checked by ``parse``.

    Args:
        company: the tenant. path: e.g. ``"verbs.daily_caps"``. parse: one of this module's parsers
            (one per path: results are remembered per settings object and path).
        default: returned when the value (or a section on the way) is missing or null.
        on_bad: returned when it has the wrong type; :data:`REFUSE` (the default) raises instead.
            The caller says in a comment why it fails closed or reads the fault as absent.
    Returns: the parsed value, ``default`` or ``on_bad``.
    Raises: CompanyMisconfigured (wrong type and ``on_bad`` is REFUSE), naming the path.
    """
    settings = company.settings
    if not settings:
        return default
    key = (id(settings), path)
    hit = _MEMO.get(key)
    fresh = hit is None or hit[0] is not settings
    if fresh:
        try:
            hit = (settings, _walk(settings, path, parse), None)
        except SettingError as exc:
            hit = (settings, _ABSENT, exc)
        if len(_MEMO) >= 4096:  # bounded; a clear only costs a re-check (and a log line) per row
            _MEMO.clear()
        _MEMO[key] = hit
    assert hit is not None
    err = hit[2]
    if err is None:
        return default if hit[1] is _ABSENT else hit[1]
    if fresh:
        effect = "refused" if on_bad is REFUSE else "absent" if on_bad is default else f"read as {on_bad!r}"
        _log.error(
            "company_settings_invalid",
            company_id=str(company.id),
            slug=company.slug,
            path=err.path,
            read=path,
            json_type=json_type(err.value),
            expected=err.expected,
            effect=effect,
        )
    if on_bad is REFUSE:
        raise CompanyMisconfigured(f"company {company.slug!r} is misconfigured: its {err}")
    return on_bad


# ---- writing -----------------------------------------------------------------------------------

#: the sections a write checks: the readers' paths and parsers
KNOWN: tuple[tuple[str, Callable[[Any, str], Any]], ...] = (
    ("sign_responses", boolean),
    ("platform_listing", boolean),
    ("verbs.daily_caps", daily_caps),
    ("commerce", commerce),
    ("commerce.pages", pages),
    ("access.levels", access_levels),
    ("access.rate_limits", rate_limits),
)


def _shown(value: Any) -> str:
    """A short rendering of a refused value for the writer's own error (numbers and short strings)."""
    if value is None or type(value) is bool:
        return "null" if value is None else str(value).lower()
    if type(value) in (int, float) or (type(value) is str and len(value) <= 40):
        return repr(value)
    return _a("JSON " + json_type(value))


def check_settings(settings: Any) -> dict[str, Any]:
    """Check a settings value before it is written: a JSON object whose known sections (:data:`KNOWN`)
    have their types; other keys are free-form.

    Returns: ``settings`` (``{}`` for None).
    Raises: BadRequest naming the first path of the wrong type (``settings.verbs.daily_caps must be
        a JSON object, not 5``).
    """
    if settings is None:
        return {}
    if type(settings) is not dict:
        raise BadRequest(f"settings must be a JSON object, not {_shown(settings)}")
    for path, parse in KNOWN:
        try:
            _walk(settings, path, parse)
        except SettingError as exc:
            problem = exc.problem or f"must be {exc.expected}, not {_shown(exc.value)}"
            raise BadRequest(f"settings.{exc.path} {problem}") from None
    return settings

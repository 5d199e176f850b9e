"""A compiled validity check for the flat ``input_schema`` most verbs declare, ahead of jsonschema.

Every dispatch validates its arguments against the verb's ``input_schema`` (JSON Schema draft
2020-12). jsonschema is the reference and produces the error messages; its generic walk costs about
as much as the rest of a cheap verb's gates together. :func:`compile_check` turns a flat object
schema (string / integer / boolean properties with length, pattern, range and enum keywords) into a
predicate that answers True only for arguments jsonschema accepts. False means "not known to be
valid": the caller then runs jsonschema, so refusals and their messages are jsonschema's own.
Anything outside the supported subset compiles to None (always jsonschema). tests/verbs/
test_fastcheck.py checks the predicate never accepts what jsonschema refuses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["compile_check"]

Check = Callable[[Any], bool]

# keywords without an assertion (annotations): ignored by validation
_ANNOTATIONS = frozenset({"title", "description", "$comment", "examples", "default", "deprecated"})
_TOP = frozenset({"type", "properties", "required", "additionalProperties"}) | _ANNOTATIONS
_PROP = frozenset({"type", "minLength", "maxLength", "pattern", "minimum", "maximum", "enum"}) | _ANNOTATIONS


def _never(_value: Any) -> bool:
    return False


def _prop_check(schema: Any) -> Check:
    """The predicate of one property schema; :func:`_never` (ask jsonschema) when unsupported."""
    if not isinstance(schema, Mapping) or not set(schema) <= _PROP:
        return _never
    typ = schema.get("type")
    if typ == "string":
        if any(k in schema for k in ("minimum", "maximum")):
            return _never
        lo, hi, pat, enum = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern"), schema.get("enum")
        if (lo is not None and type(lo) is not int) or (hi is not None and type(hi) is not int):
            return _never
        if pat is not None and not isinstance(pat, str):
            return _never
        if enum is not None and not (isinstance(enum, list) and all(type(e) is str for e in enum)):
            return _never
        rx = re.compile(pat) if pat is not None else None  # jsonschema: re.search(pattern, instance)
        allowed = frozenset(enum) if enum is not None else None

        def check_str(v: Any) -> bool:
            return (
                type(v) is str
                and (lo is None or len(v) >= lo)
                and (hi is None or len(v) <= hi)
                and (rx is None or rx.search(v) is not None)
                and (allowed is None or v in allowed)
            )

        return check_str
    if typ == "integer":
        if any(k in schema for k in ("minLength", "maxLength", "pattern", "enum")):
            return _never
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if (lo is not None and type(lo) is not int) or (hi is not None and type(hi) is not int):
            return _never

        def check_int(v: Any) -> bool:  # bool is not an integer; floats (1.0) are left to jsonschema
            return type(v) is int and (lo is None or v >= lo) and (hi is None or v <= hi)

        return check_int
    if typ == "boolean" and set(schema) <= {"type"} | _ANNOTATIONS:
        return lambda v: type(v) is bool
    return _never


def compile_check(schema: Mapping[str, Any]) -> Check | None:
    """A predicate for ``schema`` that is True only for instances jsonschema (draft 2020-12) accepts,
    or None when the schema is outside the supported flat subset.

    Args:
        schema: a verb ``input_schema`` (already checked by ``Draft202012Validator.check_schema``).
    Returns: ``check(args) -> bool`` (False: not known valid, run jsonschema) or None.
    """
    if not isinstance(schema, Mapping) or not set(schema) <= _TOP or schema.get("type") != "object":
        return None
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, Mapping) or not isinstance(required, list) or type(extra) is not bool:
        return None
    checks = {name: _prop_check(sub) for name, sub in props.items()}
    req = tuple(required)

    def check(args: Any) -> bool:
        if type(args) is not dict:
            return False
        for name in req:
            if name not in args:
                return False
        for name, value in args.items():
            c = checks.get(name)
            if c is None:
                if not extra:
                    return False
            elif not c(value):
                return False
        return True

    return check

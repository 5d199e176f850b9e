"""A faster ``__init__`` for the frozen, slotted dataclasses made on every dispatch (Call, Inputs,
Decision, Principal).

A frozen dataclass's generated ``__init__`` stores each field with ``object.__setattr__(self,
name, value)``: a global lookup, an attribute lookup and a generic set-attribute call per field,
about as much as building a small dict each. :func:`fast_init` gives the class an ``__init__`` with
the same signature and the same result that stores through the slots' own descriptors instead
(about 2x less per field). The class stays frozen: assigning to an instance still raises
``dataclasses.FrozenInstanceError``; only ``__init__`` writes the slots, as the generated one does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_init"]

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of ``cls`` (a ``@dataclass(frozen=True, slots=True)`` with plain
    fields: positional-or-keyword, ``init=True``, no ``__post_init__``, no InitVar) by one that
    stores through the slot descriptors. The dataclass's own ``__init__`` stays available as
    ``cls.__dataclass_init__`` (tests compare the two).

    Returns: ``cls``. Raises: TypeError for a class outside that subset.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: fast_init needs a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: __post_init__ is not supported")
    ns: dict[str, Any] = {"_MISSING": object()}
    args, body = [], []
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only or f._field_type is not dataclasses._FIELD:  # type: ignore[attr-defined]
            raise TypeError(f"{cls.__name__}.{f.name}: only plain init fields are supported")
        ns[f"_set_{f.name}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        if f.default is not dataclasses.MISSING:
            ns[f"_dflt_{f.name}"] = f.default
            args.append(f"{f.name}=_dflt_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"_fact_{f.name}"] = f.default_factory
            args.append(f"{f.name}=_MISSING")
            body.append(f"    if {f.name} is _MISSING:\n        {f.name} = _fact_{f.name}()")
        else:
            args.append(f.name)
        body.append(f"    _set_{f.name}(self, {f.name})")
    src = f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(src, ns)  # noqa: S102 - code built from the class's own field names only
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__dataclass_init__ = cls.__init__  # type: ignore[attr-defined]
    cls.__init__ = init  # type: ignore[misc]
    return cls

"""Which packages contribute verbs. Another package adds its ``provide(registry)`` here (one line)
or calls ``registry.register(...)`` on the app's registry (``web.VERBS_REGISTRY``) in its setup."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from . import builtin, demo
from .registry import Registry

__all__ = ["PROVIDERS", "build_registry"]

PROVIDERS: list[Callable[[Registry], None]] = [builtin.provide, demo.provide]


def build_registry(extra: Iterable[Callable[[Registry], None]] = ()) -> Registry:
    """A new registry with every provider's verbs (plus ``extra``). Raises RegistrationError."""
    reg = Registry()
    for provide in [*PROVIDERS, *extra]:
        provide(reg)
    return reg

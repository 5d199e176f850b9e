"""Demo verbs on the flower-shop data, grouped by sub-agent (sales, ar, ap, commissions, service,
compliance, marketing, ops). ``provide(registry)`` registers them all."""

from __future__ import annotations

from ..registry import Registry
from . import ap, ar, ops, sales, service
from .seed import seed_verb_demo

__all__ = ["provide", "seed_verb_demo"]


def provide(registry: Registry) -> None:
    """Register every demo verb on ``registry``."""
    for mod in (sales, ar, ap, service, ops):
        mod.provide(registry)

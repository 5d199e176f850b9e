"""Sub-agent summaries for company profiles, computed from the verb registry (pure).

The verb runtime (``ucp_gateway.verbs``) is duck-typed here so discovery does not import it: a verb
is any object with ``record["surfaces"]`` and ``policy`` carrying ``subagent``, ``risk_class``
(an enum; its ``name`` is published), ``effective_floor()`` and ``admin_only``. Wiring, one line:

    app[SUBAGENT_PROVIDER] = registry_subagent_provider(app[VERBS].registry)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..tenancy import Company
from .builder import SubagentSummary

__all__ = ["registry_subagent_provider", "summarize_verbs"]


def summarize_verbs(verbs: Iterable[Any], subagent: str, *, surface: str = "ucp") -> SubagentSummary:
    """Verb count, risk classes and role floors of one sub-agent's disclosed verbs on ``surface``.

    BLOCKED and admin-only verbs are never counted (they are never listed in the manifest either).
    """
    count, classes, floors = 0, set(), set()
    for v in verbs:
        policy = v.policy
        if policy.subagent != subagent or policy.admin_only:
            continue
        risk = getattr(policy.risk_class, "name", str(policy.risk_class))
        if risk == "BLOCKED" or surface not in v.record.get("surfaces", ()):
            continue
        count += 1
        classes.add(risk)
        floors.add(policy.effective_floor())
    return SubagentSummary(verb_count=count, risk_classes=tuple(sorted(classes)), role_floors=tuple(sorted(floors)))


def registry_subagent_provider(registry: Iterable[Any]) -> Callable[[Company, str], Awaitable[SubagentSummary]]:
    """A ``SUBAGENT_PROVIDER`` over a verb registry (iterable of verbs), recomputed per render."""

    async def provider(company: Company, subagent: str) -> SubagentSummary:
        return summarize_verbs(registry, subagent)

    return provider

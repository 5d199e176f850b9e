"""Sub-agent summaries for company profiles, computed from the verb registry (pure).

The verb runtime (``ucp_gateway.verbs``) is duck-typed here so discovery does not import it: a verb
is any object with ``policy`` carrying ``risk_class`` (an enum; its ``name`` is published) and
``effective_floor()``. Which verbs belong to a sub-agent is decided by the verb runtime alone
(``ucp_gateway.verbs.manifest.listed``, the same selection the manifest's ``?subagent=`` serves),
so the profile's ``verb_count`` and the manifest it links to always agree. Wiring, one line:

    app[SUBAGENT_PROVIDER] = registry_subagent_provider(lambda n: listed(registry, surface="ucp", subagent=n))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..tenancy import Company
from .builder import SubagentSummary

__all__ = ["registry_subagent_provider", "summarize_verbs"]


def summarize_verbs(verbs: Iterable[Any]) -> SubagentSummary:
    """Verb count, risk classes and role floors of one sub-agent's disclosed verbs.

    Args:
        verbs: the sub-agent's verbs as disclosed on the UCP surface (already selected by the caller).
    """
    count, classes, floors = 0, set(), set()
    for v in verbs:
        count += 1
        classes.add(getattr(v.policy.risk_class, "name", str(v.policy.risk_class)))
        floors.add(v.policy.effective_floor())
    return SubagentSummary(verb_count=count, risk_classes=tuple(sorted(classes)), role_floors=tuple(sorted(floors)))


def registry_subagent_provider(
    select: Callable[[str], Iterable[Any]],
) -> Callable[[Company, str], Awaitable[SubagentSummary]]:
    """A ``SUBAGENT_PROVIDER`` over ``select(subagent) -> disclosed verbs``, recomputed per render
    (so verbs registered later are counted)."""

    async def provider(company: Company, subagent: str) -> SubagentSummary:
        return summarize_verbs(select(subagent))

    return provider

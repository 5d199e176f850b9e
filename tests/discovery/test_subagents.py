"""Sub-agent summaries from a verb registry (the verbs package's Verb/VerbPolicy shape)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ucp_gateway.discovery.subagents import registry_subagent_provider, summarize_verbs


class Risk(enum.IntEnum):
    READ = 0
    WRITE_REVERSIBLE = 1
    WRITE_FINANCIAL = 2
    BLOCKED = 4


@dataclass
class Policy:
    subagent: str | None
    risk_class: Risk
    floor: str
    admin_only: bool = False

    def effective_floor(self) -> str:
        return self.floor


@dataclass
class Verb:
    policy: Policy
    record: dict = field(default_factory=lambda: {"surfaces": ["http", "ucp", "mcp_stdio"]})


REGISTRY = [
    Verb(Policy("sales", Risk.READ, "read_only")),
    Verb(Policy("sales", Risk.WRITE_REVERSIBLE, "employee")),
    Verb(Policy("sales", Risk.WRITE_FINANCIAL, "admin")),
    Verb(Policy("ar", Risk.READ, "read_only")),
]


def by_subagent(registry: list[Verb]):
    """The selection the app wires (verbs.manifest.listed) is tested in tests/verbs; here: by name."""
    return lambda name: [v for v in registry if v.policy.subagent == name]


def test_summarize_aggregates_the_selected_verbs() -> None:
    s = summarize_verbs(by_subagent(REGISTRY)("sales"))
    assert s.verb_count == 3
    assert s.risk_classes == ("READ", "WRITE_FINANCIAL", "WRITE_REVERSIBLE")
    assert s.role_floors == ("admin", "employee", "read_only")
    assert summarize_verbs([]).verb_count == 0


async def test_provider_reads_the_live_registry() -> None:
    registry = list(REGISTRY)
    provider = registry_subagent_provider(by_subagent(registry))
    assert (await provider(None, "ar")).verb_count == 1
    registry.append(Verb(Policy("ar", Risk.WRITE_REVERSIBLE, "employee")))
    assert (await provider(None, "ar")).verb_count == 2

"""The unified verb registry: VerbRecords validated at registration, each with its policy and handler.

solid-verbs spec/manifest.md "Registration semantics": one declaration per verb, last write wins,
``company_id``/``user_id`` never in ``input_schema``, both naming styles (``{domain}.{verb}`` and
snake_case dispatcher verbs) in one registry. Our stricter rules (digest §8 G1, G5, G6, G8, G13):
blocked names and normalized-name collisions are refused, a non-READ class needs a write
``side_effects`` and consent, a typed-phrase class needs a phrase builder, ``tier_floor`` must be a
known tier, and UCP may not carry IRREVERSIBLE or company-side financial verbs (G4).

Registering from another package is one call::

    registry.register(record, VerbPolicy(risk_class=RiskClass.WRITE_REVERSIBLE, ...), handler)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .errors import RegistrationError
from .fastcheck import compile_check
from .policy import BLOCKED_NAMES, SURFACES, TIERS, Consent, RiskClass, VerbPolicy, normalize_name
from .schemas import record_validator

__all__ = ["ArgError", "Handler", "Registry", "Verb", "shape_ref"]

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[dict[str, Any]]]  # async (VerbContext) -> result dict
READ_SHAPES = frozenset(
    {
        "aggregate",
        "explain",
        "preview",
        "suggest",
        "subscribe",
        "discovery",
        "trail",
        "reputation",
        "telemetry",
    }
)
RESERVED_ARGS = ("company_id", "user_id")
_SHAPE_BASE = {
    "trail": "https://ucp-gateway.dev/schema/solid-verbs/v1",
    "reputation": "https://ucp-gateway.dev/schema/solid-verbs/v1",
    "macro": "https://ucp-gateway.dev/schema/solid-verbs/v1",
    "telemetry": "https://ucp-gateway.dev/schema/solid-verbs/v1",
}


def shape_ref(shape: str) -> dict[str, str]:
    """``output_schema`` pointing at the shape's schema ``$id`` (schema/shapes/<shape>.json)."""
    base = _SHAPE_BASE.get(shape, "https://solidnumber.com/solid-verbs/v1")
    return {"$ref": f"{base}/shapes/{shape}.json"}


@dataclass(frozen=True, slots=True)
class ArgError:
    """One argument problem: JSON path (``$.steps[0].verb``) and message."""

    path: str
    message: str


@dataclass(frozen=True, slots=True)
class Verb:
    """A registered verb: the published record (defaults filled), its policy and handler."""

    record: Mapping[str, Any]
    policy: VerbPolicy
    handler: Handler
    input_validator: Draft202012Validator
    fast_check: Callable[[Any], bool] | None = None  # True only when input_validator accepts (fastcheck.py)
    # copies of record["name"] / record["shape"], read several times per dispatch
    name: str = field(init=False, repr=False, compare=False)
    shape: str = field(init=False, repr=False, compare=False)
    is_write: bool = field(init=False, repr=False, compare=False)  # not READ or BLOCKED
    # whether decide may mint a typed-phrase nonce for it (dispatcher._may_mint of the policy)
    may_mint: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", str(self.record["name"]))
        object.__setattr__(self, "shape", str(self.record["shape"]))
        object.__setattr__(self, "is_write", self.policy.risk_class not in (RiskClass.READ, RiskClass.BLOCKED))
        p = self.policy
        mint = p.escalate is not None or p.phrase is not None or p.effective_consent() is Consent.TYPED_PHRASE
        object.__setattr__(self, "may_mint", mint)

    def check_args(self, args: Mapping[str, Any]) -> list[ArgError]:
        """Validate ``args`` against ``input_schema`` (draft 2020-12). Returns problems, best first."""
        if self.fast_check is not None and self.fast_check(args):
            return []  # known valid; otherwise jsonschema decides and words the problems
        errors = sorted(self.input_validator.iter_errors(args), key=lambda e: (len(e.path), e.message))
        out = []
        for e in errors[:5]:
            path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
            out.append(ArgError(path, e.message[:300]))
        return out


def _fail(name: Any, why: str) -> RegistrationError:
    return RegistrationError(f"verb {name!r}: {why}")


def _check_record(record: Mapping[str, Any]) -> dict[str, Any]:
    rec = dict(record)
    errs = sorted(record_validator().iter_errors(rec), key=lambda e: e.path)
    if errs:
        e = errs[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(record)"
        raise _fail(rec.get("name"), f"VerbRecord invalid at {where}: {e.message[:200]}")
    try:
        Draft202012Validator.check_schema(rec["input_schema"])
    except SchemaError as exc:
        raise _fail(rec["name"], f"input_schema is not a valid JSON Schema: {exc.message[:200]}") from None
    if rec["input_schema"].get("type", "object") != "object":
        raise _fail(rec["name"], "input_schema must describe an object")
    declared = set(rec["input_schema"].get("properties", {})) | set(rec["input_schema"].get("required", []))
    bad = declared & set(RESERVED_ARGS)
    if bad:
        raise _fail(rec["name"], f"input_schema must not declare {sorted(bad)}: the runtime injects them")
    if ".." in rec["name"] or rec["name"].endswith("."):
        raise _fail(rec["name"], "name has an empty segment")
    return rec


def _check_policy(rec: dict[str, Any], policy: VerbPolicy) -> None:
    name, cls = rec["name"], policy.risk_class
    side = rec.get("side_effects")
    if cls in (RiskClass.READ, RiskClass.BLOCKED):
        if side in ("write", "mixed") and cls is RiskClass.READ:
            raise _fail(name, "a READ verb cannot declare write side effects")
    else:
        if side not in ("write", "mixed"):
            raise _fail(name, f"{cls.name} needs side_effects 'write' or 'mixed' declared explicitly")
        if rec.get("requires_consent") is False:
            raise _fail(name, f"{cls.name} needs requires_consent true")
        if side == "mixed" and (policy.revert is None or cls is RiskClass.IRREVERSIBLE):
            raise _fail(name, "a 'mixed' verb must be reversible (revert handler, not IRREVERSIBLE)")
        if rec["shape"] in READ_SHAPES:
            raise _fail(name, f"shape {rec['shape']!r} is a read shape")
    if cls is RiskClass.READ and rec["shape"] not in READ_SHAPES:
        raise _fail(name, f"shape {rec['shape']!r} is a write shape; class it as a write")
    if policy.effective_consent() is Consent.TYPED_PHRASE and cls is not RiskClass.BLOCKED and policy.phrase is None:
        raise _fail(name, f"{cls.name} uses the typed-phrase gate and needs a phrase builder")
    if rec.get("tier_floor", "starter") not in TIERS:
        raise _fail(name, f"tier_floor must be one of {', '.join(TIERS)}")
    surfaces = rec.get("surfaces", SURFACES)
    if "ucp" in surfaces and (
        cls is RiskClass.IRREVERSIBLE or (cls is RiskClass.WRITE_FINANCIAL and "buyer" not in policy.principals)
    ):
        raise _fail(name, "UCP may carry neither IRREVERSIBLE nor company-side financial verbs")
    if policy.binding is not None and list(surfaces) != [policy.binding]:
        # no other door could run it, so no other surface's manifest (MCP stdio, CLI, WebMCP) may list it
        raise _fail(name, f"a verb of the {policy.binding!r} binding must declare surfaces [{policy.binding!r}]")
    if not policy.principals or not policy.principals <= {"staff", "agent", "buyer"}:
        raise _fail(name, "principals must be a non-empty subset of staff, agent, buyer")


class Registry:
    """The one registry every transport projects (solid-verbs UNIFIED_VERB_REGISTRY).

    ``version`` increases on every registration and feeds the manifest ETag.
    """

    def __init__(self) -> None:
        self._verbs: dict[str, Verb] = {}
        self._normalized: dict[str, str] = {}
        self._sorted: list[Verb] | None = None
        self.version = 0

    def register(self, record: Mapping[str, Any], policy: VerbPolicy, handler: Handler) -> Verb:
        """Validate and add one verb; the same name again replaces it (last write wins).

        Args:
            record: a VerbRecord (schema/verb-record.json); omitted defaults are filled in.
            policy: its server-side :class:`VerbPolicy`.
            handler: ``async (ctx: VerbContext) -> dict`` producing the shape's output.
        Returns: the registered :class:`Verb`.
        Raises: RegistrationError.
        """
        rec = _check_record(record)
        name = rec["name"]
        norm = normalize_name(name)
        if norm in BLOCKED_NAMES:
            raise _fail(name, "blocked names can never be registered")
        other = self._normalized.get(norm)
        if other is not None and other != name:
            raise _fail(name, f"normalized name collides with {other!r}")
        _check_policy(rec, policy)
        write = policy.risk_class not in (RiskClass.READ, RiskClass.BLOCKED)
        rec.setdefault("side_effects", "read")
        rec.setdefault("output_schema", shape_ref(rec["shape"]))
        rec.setdefault("surfaces", list(SURFACES))
        rec.setdefault("requires_consent", write)
        rec.setdefault("tier_floor", "starter")
        if name in self._verbs:
            log.warning("verb %s re-registered (last write wins)", name)
        schema = rec["input_schema"]
        verb = Verb(rec, policy, handler, Draft202012Validator(schema), compile_check(schema))
        self._verbs[name] = verb
        self._normalized[norm] = name
        self._sorted = None
        self.version += 1
        return verb

    def verb(self, record: Mapping[str, Any], policy: VerbPolicy) -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`register`."""

        def deco(fn: Handler) -> Handler:
            self.register(record, policy, fn)
            return fn

        return deco

    def get(self, name: str) -> Verb | None:
        return self._verbs.get(name)

    def __iter__(self) -> Iterator[Verb]:
        if self._sorted is None:
            self._sorted = sorted(self._verbs.values(), key=lambda v: v.name)
        return iter(self._sorted)

    def __len__(self) -> int:
        return len(self._verbs)

    def __contains__(self, name: object) -> bool:
        return name in self._verbs

"""Helpers shared by the demo verbs: schema snippets, confidence bands, row lookups."""

from __future__ import annotations

from typing import Any

from ..errors import VerbError

__all__ = ["ID", "band", "obj", "one"]

ID = {"type": "string", "minLength": 1, "maxLength": 64}


def obj(required: list[str], **props: Any) -> dict[str, Any]:
    """A closed object input_schema."""
    return {"type": "object", "additionalProperties": False, "required": required, "properties": props}


def band(confidence: float, sample_size: int | None) -> str:
    """Confidence band (digest §8 G24): learning below 30 samples, else high >= .75, medium >= .5, low."""
    if sample_size is None or sample_size < 30:
        return "learning"
    return "high" if confidence >= 0.75 else "medium" if confidence >= 0.5 else "low"


async def one(conn, sql: str, *args: Any, what: str, path: str) -> Any:
    """Fetch one row or raise ``not_found`` naming the argument."""
    row = await conn.fetchrow(sql, *args)
    if row is None:
        raise VerbError("not_found", f"no {what} {args[0]!r}", path=path)
    return row

"""The JSON Schemas we own (``schema/``): VerbRecord, envelope and the shape outputs.

Loaded once from the package data (``ucp_gateway/_schema`` = the repository's ``schema/``) into a
``referencing`` registry, so ``discovery.json``'s ``$ref: ../verb-record.json`` resolves offline.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

__all__ = ["SHAPES", "envelope_validator", "load_schema", "record_validator", "shape_validator"]

SHAPES: tuple[str, ...] = (
    "aggregate",
    "explain",
    "preview",
    "suggest",
    "transaction",
    "receipt",
    "revert",
    "subscribe",
    "discovery",
    "trail",
    "reputation",
    "macro",
    "telemetry",
)


@lru_cache(maxsize=1)
def _all() -> tuple[dict[str, dict[str, Any]], Registry]:
    root = resources.files("ucp_gateway").joinpath("_schema")
    docs: dict[str, dict[str, Any]] = {}
    for rel in ["verb-record.json", "envelope.json", *[f"shapes/{s}.json" for s in SHAPES]]:
        node = root
        for part in rel.split("/"):
            node = node.joinpath(part)
        docs[rel] = json.loads(node.read_text("utf-8"))
    reg: Registry = Registry().with_resources((doc["$id"], Resource.from_contents(doc)) for doc in docs.values())
    return docs, reg


def load_schema(rel: str) -> dict[str, Any]:
    """A schema document by its path under ``schema/`` (e.g. ``"shapes/preview.json"``)."""
    return _all()[0][rel]


def _validator(rel: str) -> Draft202012Validator:
    docs, reg = _all()
    return Draft202012Validator(docs[rel], registry=reg)


@lru_cache(maxsize=1)
def record_validator() -> Draft202012Validator:
    """Validator of ``schema/verb-record.json``."""
    return _validator("verb-record.json")


@lru_cache(maxsize=1)
def envelope_validator() -> Draft202012Validator:
    """Validator of ``schema/envelope.json``."""
    return _validator("envelope.json")


@cache
def shape_validator(shape: str) -> Draft202012Validator:
    """Validator of ``schema/shapes/<shape>.json``. Raises KeyError for an unknown shape."""
    return _validator(f"shapes/{shape}.json")

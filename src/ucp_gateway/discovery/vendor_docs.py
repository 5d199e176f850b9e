"""The vendor capability documents the gateway serves itself (spec pages and JSON Schemas).

Each ``{vendor}.{name}`` capability's ``spec`` and ``schema`` URLs point under ``vendor_base_url``;
a deployment on its own domain sets the prefix and base URL together and the gateway answers those
paths. Documents are generated from the namespace, so they always name the configured prefix.
"""

from __future__ import annotations

import json
from typing import Any

from ..tenancy import SUBAGENTS
from .builder import VendorNamespace

__all__ = ["DOCUMENT_NAMES", "schema_document", "spec_document"]

_SUBAGENT_TEXT = {
    "sales": "CRM, deals and customers",
    "ar": "accounts receivable: invoices and incoming payments",
    "ap": "accounts payable: bills and vendors",
    "commissions": "sales commissions",
    "service": "scheduling and service work",
    "compliance": "GDPR requests and audit",
    "marketing": "email, social and CMS",
    "ops": "infrastructure operations",
}
DOCUMENT_NAMES: tuple[str, ...] = (*SUBAGENTS, "agent_graph", "mock_payment")


def spec_document(vendor: VendorNamespace, name: str) -> bytes | None:
    """Markdown spec page for ``{vendor}.{name}``, or None for an unknown name."""
    cap = vendor.name(name)
    if name in _SUBAGENT_TEXT:
        body = (
            f"# {cap}\n\nSub-agent capability ({_SUBAGENT_TEXT[name]}), version {vendor.version}.\n\n"
            "A root capability listed in a company's business profile when the sub-agent is enabled. "
            "Its `config` is the INDEX wave of progressive disclosure:\n\n"
            "- `verb_count`: verbs exposed on the UCP surface\n- `risk_classes`: risk classes present\n"
            "- `role_floors`: minimum roles present\n- `manifest`: URL of the verb manifest (VerbRecords)\n\n"
            f"Schema: {vendor.schema_url(name)}\n"
        )
    elif name == "agent_graph":
        body = (
            f"# {cap}\n\nPlatform node capability, version {vendor.version}. Its `config` links "
            "every company of the platform: `companies` (`slug`, `name`, `profile`), `next` (URL of the "
            "next page or null) and `pages` (the page endpoint; pass `cursor`). Company profiles carry "
            "the sub-agent capabilities.\n\n"
            f"Schema: {vendor.schema_url(name)}\n"
        )
    elif name == "mock_payment":
        body = (
            f"# {cap}\n\nDemo payment handler (id `mock_payment_handler`). Instrument credential "
            "tokens decide the result: `success_token` charges, `fail_token` is declined. "
            "Never use in production.\n"
        )
    else:
        return None
    return body.encode()


def _schema(vendor: VendorNamespace, name: str, title: str, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": vendor.schema_url(name),
        "title": title,
        "type": "object",
        "$defs": {"config": config},
    }


def schema_document(vendor: VendorNamespace, name: str) -> bytes | None:
    """JSON Schema (draft 2020-12) for ``{vendor}.{name}``; ``$defs.config`` is the config shape."""
    if name in _SUBAGENT_TEXT:
        config = {
            "type": "object",
            "required": ["verb_count", "risk_classes", "role_floors", "manifest"],
            "properties": {
                "verb_count": {"type": "integer", "minimum": 0},
                "risk_classes": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "role_floors": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "manifest": {"type": "string", "format": "uri"},
            },
        }
    elif name == "agent_graph":
        company = {
            "type": "object",
            "required": ["slug", "name"],
            "properties": {
                "slug": {"type": "string"},
                "name": {"type": "string"},
                "profile": {"type": "string", "format": "uri"},
            },
        }
        config = {
            "type": "object",
            "required": ["companies", "next", "pages"],
            "properties": {
                "companies": {"type": "array", "items": company},
                "next": {"type": ["string", "null"], "format": "uri"},
                "pages": {"type": "string", "format": "uri"},
            },
        }
    elif name == "mock_payment":
        config = {"type": "object", "properties": {"environment": {"const": "demo"}}}
    else:
        return None
    doc = _schema(vendor, name, vendor.name(name), config)
    return json.dumps(doc, indent=2, sort_keys=True).encode()

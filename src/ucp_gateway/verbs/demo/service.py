"""Service, compliance and marketing verbs: service.explain_contact_state (explain),
gdpr_delete_contact (receipt, IRREVERSIBLE, typed phrase), discount_create (receipt,
WRITE_REVERSIBLE; revert deletes the code)."""

from __future__ import annotations

from typing import Any

import asyncpg

from ..audit import iso
from ..context import RevertContext, VerbContext
from ..errors import VerbError
from ..policy import RiskClass, VerbPolicy
from ..registry import Registry
from .common import obj, one

__all__ = ["provide"]

_CONTACT = {"type": "integer", "minimum": 1}


async def _explain_contact(ctx: VerbContext) -> dict[str, Any]:
    cid = ctx.args["contact_id"]
    c = await one(ctx.conn, "SELECT * FROM crm_contacts WHERE id = $1", cid, what="contact", path="$.contact_id")
    chain: list[dict[str, Any]] = []
    if c["customer_id"]:
        for o in await ctx.conn.fetch(
            "SELECT id, created_at, paid_amount FROM sales_orders WHERE customer_id = $1", c["customer_id"]
        ):
            chain.append(
                {
                    "action": "order_placed",
                    "timestamp": iso(o["created_at"]),
                    "detail": {"order_id": o["id"], "paid": o["paid_amount"]},
                }
            )
        for rf in await ctx.conn.fetch(
            "SELECT r.id, r.amount, r.created_at FROM refunds r JOIN sales_orders o "
            "ON o.id = r.order_id WHERE o.customer_id = $1",
            c["customer_id"],
        ):
            chain.append(
                {
                    "action": "refund_issued",
                    "timestamp": iso(rf["created_at"]),
                    "detail": {"refund_id": rf["id"], "amount": rf["amount"]},
                }
            )
    for e in await ctx.conn.fetch(
        "SELECT type, data, created_at FROM agent_events WHERE entity_type = 'crm_contact' "
        "AND entity_id = $1 ORDER BY seq",
        str(cid),
    ):
        chain.append({"action": e["type"], "timestamp": iso(e["created_at"]), "detail": e["data"]})
    chain.sort(key=lambda x: x["timestamp"])
    ctx.set_entity("crm_contact", cid)
    last = chain[-1]["action"] if chain else "no recorded activity"
    return {
        "entity_id": cid,
        "entity_type": "crm_contact",
        "causal_chain": chain,
        "current_state": {"status": c["status"], "lifecycle_stage": c["lifecycle_stage"]},
        "reasoning": f"{c['name']} is {c['status']} ({c['lifecycle_stage']}); {len(chain)} events, last: {last}.",
    }


def _gdpr_phrase(args) -> str:
    return f"DELETE CONTACT {int(args['contact_id'])} PERMANENTLY"


async def _gdpr_delete(ctx: VerbContext) -> dict[str, Any]:
    cid = ctx.args["contact_id"]
    c = await one(
        ctx.conn,
        "DELETE FROM crm_contacts WHERE id = $1 RETURNING id, customer_id",
        cid,
        what="contact",
        path="$.contact_id",
    )
    if c["customer_id"]:
        await ctx.conn.execute("DELETE FROM addresses WHERE customer_id = $1", c["customer_id"])
        await ctx.conn.execute(
            "UPDATE customers SET name = 'Erased customer', email = 'erased+' || id || '@invalid' WHERE id = $1",
            c["customer_id"],
        )
    ctx.set_entity("crm_contact", cid)
    await ctx.emit("gdpr.contact_erased", "crm_contact", cid, {})
    return {"outcome": "erased", "contact_id": cid, "customer_id": c["customer_id"]}


async def _discount_create(ctx: VerbContext) -> dict[str, Any]:
    a = ctx.args
    if a["type"] == "percentage" and a["value"] > 100:
        raise VerbError("invalid_arguments", "a percentage is at most 100", path="$.value")
    try:
        async with ctx.conn.transaction():  # savepoint: a duplicate code must not poison the transaction
            await ctx.conn.execute(
                "INSERT INTO discounts (company_id, code, type, value, currency, description) "
                "VALUES ($1,$2,$3,$4,$5,$6)",
                ctx.company.id,
                a["code"],
                a["type"],
                a["value"],
                "USD" if a["type"] == "fixed_amount" else None,
                a.get("description", ""),
            )
    except asyncpg.UniqueViolationError:
        raise VerbError("already_exists", f"discount code {a['code']} exists", path="$.code") from None
    ctx.set_revert(f"discount:{a['code']}:delete", {"code": a["code"]})
    ctx.set_entity("discount", a["code"])
    await ctx.emit("discount.created", "discount", a["code"], {"type": a["type"], "value": a["value"]})
    return {"outcome": "created", "code": a["code"]}


async def _discount_revert(r: RevertContext) -> dict[str, Any]:
    code = r.entry["revert_data"]["code"]
    await r.conn.execute("DELETE FROM discounts WHERE code = $1", code)
    return {"revert_action": f"deleted discount code {code}"}


def provide(registry: Registry) -> None:
    r = registry.register
    r(
        {
            "name": "service.explain_contact_state",
            "shape": "explain",
            "description": "Why a CRM contact is in its current state: orders, refunds and recorded changes "
            "in time order.",
            "input_schema": obj(["contact_id"], contact_id=_CONTACT),
        },
        VerbPolicy(RiskClass.READ, subagent="service"),
        _explain_contact,
    )
    r(
        {
            "name": "gdpr_delete_contact",
            "shape": "receipt",
            "side_effects": "write",
            "description": "Erase a CRM contact and anonymise the linked customer (GDPR right to erasure). "
            "IRREVERSIBLE: owner only, typed phrase, cannot be reverted.",
            "input_schema": obj(["contact_id"], contact_id=_CONTACT),
            "surfaces": ["http", "mcp_stdio", "webmcp", "cli"],
        },
        VerbPolicy(RiskClass.IRREVERSIBLE, subagent="compliance", phrase=_gdpr_phrase),
        _gdpr_delete,
    )
    r(
        {
            "name": "discount_create",
            "shape": "receipt",
            "side_effects": "write",
            "description": "Create a discount code (percentage or fixed amount in minor units). Reversible: "
            "audit.revert deletes the code.",
            "input_schema": obj(
                ["code", "type", "value"],
                code={"type": "string", "pattern": "^[A-Z0-9]{3,20}$"},
                type={"enum": ["percentage", "fixed_amount"]},
                value={"type": "integer", "minimum": 1, "maximum": 2**63 - 1},  # discounts.value is bigint
                description={"type": "string", "maxLength": 200},
            ),
        },
        VerbPolicy(RiskClass.WRITE_REVERSIBLE, subagent="marketing", revert=_discount_revert),
        _discount_create,
    )

"""Sales sub-agent verbs: customer.context (aggregate), sales.suggest_next_actions (suggest),
crm_contact_update (receipt, WRITE_REVERSIBLE, revert restores the snapshot)."""

from __future__ import annotations

from typing import Any

from ..audit import iso
from ..context import RevertContext, VerbContext
from ..errors import VerbError
from ..policy import RiskClass, VerbPolicy
from ..registry import Registry
from .common import ID, band, obj, one

__all__ = ["provide"]

_CONTACT_FIELDS = ("status", "phone", "notes", "lifecycle_stage")


async def _customer_context(ctx: VerbContext) -> dict[str, Any]:
    cid, c = ctx.args["customer_id"], ctx.conn
    cust = await one(
        c, "SELECT id, name, email FROM customers WHERE id = $1", cid, what="customer", path="$.customer_id"
    )
    addrs = await c.fetch("SELECT id, city, state, country FROM addresses WHERE customer_id = $1 ORDER BY id", cid)
    pms = []
    if ctx.args.get("include_payment_methods", True):
        pms = await c.fetch("SELECT id, brand, last_digits FROM payment_instruments ORDER BY id")
    orders = await c.fetch(
        "SELECT id, status, paid_amount, refunded_amount, currency, created_at FROM sales_orders "
        "WHERE customer_id = $1 ORDER BY created_at",
        cid,
    )
    contact = await c.fetchrow("SELECT id, status, lifecycle_stage FROM crm_contacts WHERE customer_id = $1", cid)
    ltv = sum(o["paid_amount"] - o["refunded_amount"] for o in orders)
    data = {
        "name": cust["name"],
        "email": cust["email"],
        "lifetime_value": ltv,
        "currency": orders[0]["currency"] if orders else "USD",
        "order_count": len(orders),
        "addresses": [dict(a) for a in addrs],
        "payment_methods": [dict(p) for p in pms],
        "orders": [
            {
                "id": o["id"],
                "status": o["status"],
                "paid": o["paid_amount"],
                "refunded": o["refunded_amount"],
                "created_at": iso(o["created_at"]),
            }
            for o in orders
        ],
        "crm": dict(contact) if contact else None,
    }
    rel = [{"type": "order", "id": o["id"]} for o in orders] + [{"type": "address", "id": a["id"]} for a in addrs]
    if contact:
        rel.append({"type": "crm_contact", "id": contact["id"]})
    ctx.set_entity("customer", cid)
    return {
        "entity_id": cid,
        "entity_type": "customer",
        "data": data,
        "relations": rel,
        "fetched_at": iso(ctx.now),
    }


async def _suggest(ctx: VerbContext) -> dict[str, Any]:
    cid, c = ctx.args["customer_id"], ctx.conn
    await one(c, "SELECT id FROM customers WHERE id = $1", cid, what="customer", path="$.customer_id")
    contact = await c.fetchrow("SELECT id, status FROM crm_contacts WHERE customer_id = $1", cid)
    o = await c.fetchrow(
        "SELECT count(*) AS n, coalesce(sum(paid_amount - refunded_amount), 0) AS ltv, "
        " count(*) FILTER (WHERE refunded_amount > 0) AS refunded FROM sales_orders WHERE customer_id = $1",
        cid,
    )
    sample = await c.fetchval("SELECT count(*) FROM sales_orders")
    out = []

    def add(action: str, conf: float, reason: str, **extra: Any) -> None:
        out.append(
            {
                "action": action,
                "confidence": conf,
                "confidence_band": band(conf, sample),
                "reason": reason,
                "model_version": "rules-v1",
                "sample_size": int(sample),
                **extra,
            }
        )

    if contact and contact["status"] == "lost":
        add(
            "crm_contact_update",
            0.55,
            "contact was lost; re-engage and mark active",
            args={"contact_id": contact["id"], "status": "active"},
        )
    if o["ltv"] >= 10000 and contact and contact["status"] != "vip":
        add(
            "crm_contact_update",
            0.82,
            f"lifetime value {o['ltv']} minor units qualifies for VIP",
            args={"contact_id": contact["id"], "status": "vip"},
        )
    if o["refunded"]:
        add(
            "service.explain_contact_state",
            0.6,
            "a refund was issued; check satisfaction before selling again",
        )
    if o["n"] == 0:
        add("discount_create", 0.5, "no orders yet; a welcome code converts first-time buyers")
    add("customer.context", 0.3, "refresh the full picture before acting")
    out.sort(key=lambda s: -s["confidence"])
    ctx.set_entity("customer", cid)
    return {"suggestions": out}


async def _contact_update(ctx: VerbContext) -> dict[str, Any]:
    cid = ctx.args["contact_id"]
    before = await one(
        ctx.conn,
        "SELECT id, status, phone, notes, lifecycle_stage FROM crm_contacts WHERE id = $1 FOR UPDATE",
        cid,
        what="contact",
        path="$.contact_id",
    )
    changes = {k: ctx.args[k] for k in _CONTACT_FIELDS if k in ctx.args}
    sets = ", ".join(f"{k} = ${i + 2}" for i, k in enumerate(changes))
    await ctx.conn.execute(
        f"UPDATE crm_contacts SET {sets}, updated_at = ${len(changes) + 2} WHERE id = $1",
        cid,
        *changes.values(),
        ctx.now,
    )
    snap = {k: before[k] for k in changes}
    ctx.set_revert(f"crm:contact:{cid}:pre_update_snapshot", {"contact_id": cid, "before": snap})
    ctx.set_entity("crm_contact", cid)
    await ctx.emit("crm.contact.updated", "crm_contact", cid, {"changes": changes})
    return {"outcome": "updated", "contact_id": cid, "previous": snap, "current": changes}


async def _contact_revert(r: RevertContext) -> dict[str, Any]:
    data = r.entry["revert_data"]
    cid, before = data["contact_id"], data["before"]
    sets = ", ".join(f"{k} = ${i + 2}" for i, k in enumerate(before))
    done = await r.conn.execute(f"UPDATE crm_contacts SET {sets} WHERE id = $1", cid, *before.values())
    if done.endswith(" 0"):
        raise VerbError("not_found", f"contact {cid} no longer exists; cannot restore it")
    await r.conn.execute(
        "INSERT INTO agent_events (company_id, type, entity_type, entity_id, data, created_at) "
        "VALUES ($1, 'crm.contact.restored', 'crm_contact', $2, $3::jsonb, $4)",
        r.company.id,
        str(cid),
        {"audit_id": r.audit_id},
        r.now,
    )
    return {"revert_action": f"restored contact {cid} fields {sorted(before)} from the pre-update snapshot"}


def provide(registry: Registry) -> None:
    r = registry.register
    r(
        {
            "name": "customer.context",
            "shape": "aggregate",
            "description": "Everything about one customer in one read: profile, addresses, payment methods (brand and "
            "last digits only), orders with lifetime value, and the CRM contact.",
            "input_schema": obj(["customer_id"], customer_id=ID, include_payment_methods={"type": "boolean"}),
        },
        VerbPolicy(RiskClass.READ, subagent="sales"),
        _customer_context,
    )
    r(
        {
            "name": "sales.suggest_next_actions",
            "shape": "suggest",
            "description": "Ranked next actions for a customer (VIP promotion, re-engagement, follow-up) with "
            "confidence, band and the verb to call.",
            "input_schema": obj(["customer_id"], customer_id=ID),
        },
        VerbPolicy(RiskClass.READ, subagent="sales"),
        _suggest,
    )
    r(
        {
            "name": "crm_contact_update",
            "shape": "receipt",
            "side_effects": "write",
            "description": "Update a CRM contact's status, phone, notes or lifecycle stage. Reversible: audit.revert "
            "restores the previous values.",
            "input_schema": {
                **obj(
                    ["contact_id"],
                    contact_id={"type": "integer", "minimum": 1},
                    status={"enum": ["lead", "active", "vip", "lost"]},
                    phone={"type": ["string", "null"], "maxLength": 40},
                    notes={"type": "string", "maxLength": 2000},
                    lifecycle_stage={"type": "string", "maxLength": 40},
                ),
                "minProperties": 2,
            },
        },
        VerbPolicy(RiskClass.WRITE_REVERSIBLE, subagent="sales", revert=_contact_revert),
        _contact_update,
    )

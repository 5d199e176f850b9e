"""The retention sweeper: expired rows go, live rows and rows within the margin stay, every company
is swept in its own tenant context, one replica acts at a time, batches continue to the end."""

from __future__ import annotations

import datetime as dt
import uuid

import asyncpg
import pytest

from ucp_gateway import retention
from ucp_gateway.config import Settings
from ucp_gateway.db import tenant_tx
from ucp_gateway.tenancy import create_company

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
MARGIN = 3600


def ago(seconds: int) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds)


@pytest.fixture
async def companies(database):
    a = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    b = await create_company(database.pool, slug="bolt", display_name="Bolt", hostnames=["bolt.example"])
    return a, b


async def _checkout(conn, company_id, cid: str, *, expires_at: dt.datetime, order_id: str | None = None) -> None:
    await conn.execute(
        "INSERT INTO checkout_sessions (company_id, id, status, currency, state, body, caller, order_id, created_at,"
        " updated_at, expires_at) VALUES ($1, $2, 'incomplete', 'USD', '{}', '{}', 'https://p.example/p.json', $3,"
        " $4::timestamptz - interval '6 hours', $4::timestamptz - interval '6 hours', $4)",
        company_id,
        cid,
        order_id,
        expires_at,
    )


async def _cart(conn, company_id, cart_id: str, *, expires_at: dt.datetime) -> None:
    """A cart expiring at ``expires_at``, linked to a checkout of the same id (migration 0066)."""
    await conn.execute(
        "INSERT INTO carts (company_id, id, caller, state, created_at, updated_at, expires_at) VALUES ($1, $2,"
        " 'https://p.example/p.json', '{\"line_items\": []}', $3::timestamptz - interval '7 days',"
        " $3::timestamptz - interval '7 days', $3)",
        company_id,
        cart_id,
        expires_at,
    )
    await conn.execute(
        "INSERT INTO cart_checkouts (company_id, cart_id, checkout_id) VALUES ($1, $2, $2)", company_id, cart_id
    )


async def _event(conn, company_id, order_id: str, *, created_at: dt.datetime, delivered: bool, queued=False) -> None:
    """A webhook_outbox row named by its order_id: delivered, or not (then ``queued``: still retried)."""
    event_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO webhook_outbox (company_id, id, order_id, event_type, caller, payload, created_at, attempts,"
        " next_attempt_at, delivered_at) VALUES ($1, $2, $3, 'order.created', 'https://p.example/p.json', '\\x7b7d',"
        " $4, 1, $4, $5)",
        company_id,
        event_id,
        order_id,
        created_at,
        created_at if delivered else None,
    )
    if queued:
        await conn.execute(
            "INSERT INTO webhook_queue (company_id, event_id, next_attempt_at) VALUES ($1, $2, $3)",
            company_id,
            event_id,
            created_at,
        )


async def _seed(pool, company_id, tag: str) -> None:
    """Rows on both sides of each cutoff, keyed by a name saying which side."""
    async with tenant_tx(pool, company_id) as conn:
        await conn.execute(
            "INSERT INTO partners (company_id, profile_url, role) VALUES ($1, 'https://p.example/p.json', 'buyer')",
            company_id,
        )
        await conn.execute(
            "INSERT INTO platform_credentials (company_id, id, kind, profile_url, secret_hash, created_at)"
            " VALUES ($1, 'oc_00000000000000aa', 'oauth_client', 'https://p.example/p.json', $2, $3)",
            company_id,
            "0" * 64,
            ago(86400),
        )
        for key, expires in (("expired", ago(MARGIN + 1)), ("in-margin", ago(MARGIN - 60)), ("live", NOW)):
            await conn.execute(
                "INSERT INTO verb_idempotency (company_id, principal, verb, key, args_digest, envelope, created_at,"
                " expires_at) VALUES ($1, 'p', 'checkout.create', $2, 'd', '{}', $3, $3)",
                company_id,
                f"{tag}-{key}",
                expires,
            )
            await conn.execute(
                "INSERT INTO commerce_idempotency (company_id, caller, key, fingerprint, status_code, content_type,"
                " body, created_at, expires_at) VALUES ($1, 'c', $2, '\\x00', 200, 'application/json', '\\x7b7d',"
                " $3, $3)",
                company_id,
                f"{tag}-{key}",
                expires,
            )
            await conn.execute(
                "INSERT INTO verb_nonce_mismatches (company_id, nonce_id, mismatches, expires_at)"
                " VALUES ($1, $2, 1, $3)",
                company_id,
                f"{tag}-{key}",
                expires,
            )
            await conn.execute(
                "INSERT INTO webmcp_sessions (id, company_id, token_hash, subject, role, created_at, expires_at)"
                " VALUES ($1, $2, $3, 's', 'employee', $4::timestamptz - interval '1 hour', $4)",
                uuid.uuid4(),
                company_id,
                uuid.uuid4().bytes * 2,
                expires,
            )
            await conn.execute(
                "INSERT INTO staff_sessions (id, company_id, token_hash, admin_token_id, created_at, expires_at)"
                " VALUES ($1, $2, $3, $1, $4::timestamptz - interval '1 hour', $4)",
                uuid.uuid4(),
                company_id,
                uuid.uuid4().bytes * 2,
                expires,
            )
            await conn.execute(
                "INSERT INTO verb_approvals (id, company_id, verb, args, args_digest, risk_class, phrase,"
                " requested_by, requested_via, created_at, expires_at) VALUES ($1, $2, $3, '{}', $4,"
                " 'WRITE_FINANCIAL', 'P', 'staff:x', 'http', $5::timestamptz - interval '1 hour', $5)",
                f"apr_{uuid.uuid4().hex}",
                company_id,
                f"{tag}-{key}",
                "0" * 64,
                expires,
            )
            # a rate-limit bucket whose tat has passed is full, the same as no row
            await conn.execute(
                "INSERT INTO rate_limit_buckets (company_id, bucket, tat, seen_at, granted) VALUES ($1, $2, $3, $3, 1)",
                company_id,
                f"{tag}-{key}",
                expires,
            )
            # an access token is refused once expired, revoked or not (access/proofs.py)
            await conn.execute(
                "INSERT INTO oauth_access_tokens (company_id, token_hash, client_id, scope, issued_at, expires_at)"
                " VALUES ($1, $2, 'oc_00000000000000aa', $3, $4::timestamptz - interval '15 minutes', $4)",
                company_id,
                uuid.uuid4().hex * 2,
                f"{tag}-{key}",
                expires,
            )
            await _cart(conn, company_id, f"{tag}-{key}", expires_at=expires)
            await conn.execute(
                "INSERT INTO mcp_elicitations (company_id, id_hash, caller, tool, args_digest, state, created_at,"
                " expires_at) VALUES ($1, $2, $3, 'complete_checkout', $4, '{}', $5::timestamptz - interval '5 min',"
                " $5)",
                company_id,
                uuid.uuid4().bytes * 2,
                f"{tag}-{key}",
                "0" * 64,
                expires,
            )
            await conn.execute(
                "INSERT INTO checkout_page_tokens (company_id, token_hash, checkout_id, csrf_hash, digest, issued_at,"
                " expires_at) VALUES ($1, $2, $3, $2, $4, $5::timestamptz - interval '1 hour', $5)",
                company_id,
                uuid.uuid4().bytes * 2,
                f"{tag}-{key}",
                "0" * 64,
                expires,
            )
        # a day's counters count on that UTC day; they go USAGE_KEEP + margin after it ended
        kept_from = (NOW - dt.timedelta(seconds=MARGIN + retention.USAGE_KEEP)).date()
        for key, day in (("expired", kept_from - dt.timedelta(days=1)), ("in-margin", kept_from), ("live", NOW.date())):
            await conn.execute(
                "INSERT INTO verb_daily_usage (company_id, cap_class, day, used) VALUES ($1, $2, $3, 1)",
                company_id,
                f"{tag}-{key}",
                day,
            )
            await conn.execute(
                "INSERT INTO verb_principal_usage (company_id, principal, limit_key, day, calls, amount)"
                " VALUES ($1, $2, 'buyer', $3, 1, 100)",
                company_id,
                f"{tag}-{key}",
                day,
            )
        # an abandoned checkout and a delivered webhook event go COMMERCE_KEEP + margin after they ended
        for key, ended in (
            ("expired", ago(MARGIN + retention.COMMERCE_KEEP + 1)),
            ("in-margin", ago(MARGIN + retention.COMMERCE_KEEP - 60)),
            ("live", NOW),
        ):
            await _checkout(conn, company_id, f"{tag}-{key}", expires_at=ended)
            await _event(conn, company_id, f"{tag}-{key}", created_at=ended, delivered=True)
            await conn.execute(
                "INSERT INTO checkout_confirmations (company_id, checkout_id, digest, total, reason, confirmed_at)"
                " VALUES ($1, $2, $3, 100, 'amount_limit_exceeded', $4)",
                company_id,
                f"{tag}-{key}",
                "0" * 64,
                ended,
            )
        # the SLO view's per-minute counts go SLO_KEEP + margin after their minute
        for key, minute in (
            ("expired", ago(MARGIN + retention.SLO_KEEP + 120)),
            ("in-margin", ago(MARGIN + retention.SLO_KEEP - 120)),
            ("live", NOW),
        ):
            await conn.execute(
                "INSERT INTO request_slo_minutes (company_id, minute, operation, requests, errors, buckets)"
                " VALUES ($1, date_trunc('minute', $2::timestamptz), $3, 1, 0, $4)",
                company_id,
                minute,
                f"{tag}-{key}".replace("-", "_"),
                [1] + [0] * 14,
            )
        # a spent nonce may be replayed until it expires: used_at + the longest nonce life
        for key, used in (
            ("expired", ago(MARGIN + retention.NONCE_TTL_MAX + 1)),
            ("in-margin", ago(MARGIN + retention.NONCE_TTL_MAX - 60)),
            ("live", ago(60)),
        ):
            await conn.execute(
                "INSERT INTO verb_nonces (company_id, nonce_id, used_at) VALUES ($1, $2, $3)",
                company_id,
                f"{tag}-{key}",
                used,
            )


async def _keys(pool, company_id) -> dict[str, set[str]]:
    async with tenant_tx(pool, company_id) as conn:
        return {
            "verb_idempotency": {r[0] for r in await conn.fetch("SELECT key FROM verb_idempotency")},
            "commerce_idempotency": {r[0] for r in await conn.fetch("SELECT key FROM commerce_idempotency")},
            "verb_nonce_mismatches": {r[0] for r in await conn.fetch("SELECT nonce_id FROM verb_nonce_mismatches")},
            "verb_nonces": {r[0] for r in await conn.fetch("SELECT nonce_id FROM verb_nonces")},
            "checkout_sessions": {r[0] for r in await conn.fetch("SELECT id FROM checkout_sessions")},
            "webhook_outbox": {r[0] for r in await conn.fetch("SELECT order_id FROM webhook_outbox")},
            "verb_daily_usage": {r[0] for r in await conn.fetch("SELECT cap_class FROM verb_daily_usage")},
            "verb_principal_usage": {r[0] for r in await conn.fetch("SELECT principal FROM verb_principal_usage")},
            "verb_approvals": {r[0] for r in await conn.fetch("SELECT verb FROM verb_approvals")},
            "staff_sessions": {
                "a-live" if r[0] >= NOW else "a-in-margin" if r[0] > ago(MARGIN) else "a-expired"
                for r in await conn.fetch("SELECT expires_at FROM staff_sessions")
            },
            "checkout_page_tokens": {r[0] for r in await conn.fetch("SELECT checkout_id FROM checkout_page_tokens")},
            "oauth_access_tokens": {r[0] for r in await conn.fetch("SELECT scope FROM oauth_access_tokens")},
            "carts": {r[0] for r in await conn.fetch("SELECT id FROM carts")},
            # a cart's checkout link goes with the cart (migration 0120)
            "cart_checkouts": {r[0] for r in await conn.fetch("SELECT cart_id FROM cart_checkouts")},
            "mcp_elicitations": {r[0] for r in await conn.fetch("SELECT caller FROM mcp_elicitations")},
            "rate_limit_buckets": {r[0] for r in await conn.fetch("SELECT bucket FROM rate_limit_buckets")},
            "request_slo_minutes": {
                r[0].replace("_", "-") for r in await conn.fetch("SELECT operation FROM request_slo_minutes")
            },
            "checkout_confirmations": {
                r[0] for r in await conn.fetch("SELECT checkout_id FROM checkout_confirmations")
            },
            "webmcp_sessions": {
                "a-live" if r[0] >= NOW else "a-in-margin" if r[0] > ago(MARGIN) else "a-expired"
                for r in await conn.fetch("SELECT expires_at FROM webmcp_sessions")
            },
        }


def test_cutoff_adds_the_rule_extra_to_the_margin():
    idem = next(r for r in retention.RULES if r.table == "verb_idempotency")
    nonces = next(r for r in retention.RULES if r.table == "verb_nonces")
    assert retention.cutoff(idem, NOW, 60) == NOW - dt.timedelta(seconds=60)
    assert retention.cutoff(nonces, NOW, 60) == NOW - dt.timedelta(seconds=60 + retention.NONCE_TTL_MAX)


def test_usage_cutoff_is_a_utc_date_before_which_whole_days_ended():
    """A day's counters go once the whole UTC day is older than margin + USAGE_KEEP."""
    usage = next(r for r in retention.RULES if r.table == "verb_principal_usage")
    assert usage.by_day
    # 2026-06-01 12:00 UTC - 60 s - 2 days = 2026-05-30 11:59 UTC: 05-29 ended before it, 05-30 did not
    assert retention.cutoff(usage, NOW, 60) == dt.date(2026, 5, 30)
    # an aware time in another zone is read in UTC (00:30 at +02:00 is the previous UTC day)
    east = dt.datetime(2026, 6, 3, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert retention.cutoff(usage, east, 0) == dt.date(2026, 5, 31)


def test_nonce_ttl_max_is_the_settings_bound():
    """A nonce row must outlive any nonce: the sweeper's bound is the setting's upper bound."""
    bound = next(m.le for m in Settings.model_fields["verbs_nonce_ttl"].metadata if hasattr(m, "le"))
    assert retention.NONCE_TTL_MAX == bound


async def test_run_once_deletes_only_expired_rows_of_every_company(database, companies):
    a, b = companies
    await _seed(database.pool, a.id, "a")
    await _seed(database.pool, b.id, "b")
    done = (await retention.run_once(database.pool, now=NOW, margin=MARGIN, batch=1000)).done
    assert done == {slug: {rule.table: 1 for rule in retention.RULES} for slug in ("acme", "bolt")}
    for company, tag in ((a, "a"), (b, "b")):
        left = await _keys(database.pool, company.id)
        for table, keys in left.items():
            sessions = ("webmcp_sessions", "staff_sessions")
            want = {"a-in-margin", "a-live"} if table in sessions else {f"{tag}-in-margin", f"{tag}-live"}
            assert keys == want, table
    # a second round finds nothing
    again = await retention.run_once(database.pool, now=NOW, margin=MARGIN, batch=1000)
    assert again.done == {} and again.left == 0


async def test_exactly_the_expired_carts_go_with_their_links(database, companies):
    """Carts answer not_found after expires_at (commerce.carts): those past it by the margin go, with
    their checkout links; the others stay, in every company; a company with none due is not swept."""
    a, b = companies
    async with tenant_tx(database.pool, a.id) as conn:
        for i, expires in enumerate((ago(MARGIN + 1), ago(MARGIN + 86400), ago(MARGIN - 60), NOW, ago(-86400))):
            await _cart(conn, a.id, f"a-{i}", expires_at=expires)
    async with tenant_tx(database.pool, b.id) as conn:
        await _cart(conn, b.id, "b-live", expires_at=NOW)
    done = (await retention.run_once(database.pool, now=NOW, margin=MARGIN, batch=1000)).done
    assert done == {"acme": {"carts": 2}}  # bolt had nothing due: no tenant transaction for it
    left = await _keys(database.pool, a.id)
    assert left["carts"] == left["cart_checkouts"] == {"a-2", "a-3", "a-4"}
    assert (await _keys(database.pool, b.id))["carts"] == {"b-live"}


async def test_orders_checkouts_and_queued_webhooks_are_kept(database, companies):
    """Only abandoned checkouts go (one that became an order stays with it), and only webhook events
    no longer queued (delivered, or given up after the last attempt); one still retried stays."""
    a, _ = companies
    old = ago(MARGIN + retention.COMMERCE_KEEP + 10)
    async with tenant_tx(database.pool, a.id) as conn:
        await _checkout(conn, a.id, "abandoned", expires_at=old)
        await _checkout(conn, a.id, "ordered", expires_at=old, order_id="ord_1")
        await _event(conn, a.id, "delivered", created_at=old, delivered=True)
        await _event(conn, a.id, "given-up", created_at=old, delivered=False)
        await _event(conn, a.id, "retrying", created_at=old, delivered=False, queued=True)
    done = await retention.sweep_company(database.pool, a.id, now=NOW, margin=MARGIN, batch=100)
    assert done == {"checkout_sessions": 1, "webhook_outbox": 2}
    left = await _keys(database.pool, a.id)
    assert left["checkout_sessions"] == {"ordered"} and left["webhook_outbox"] == {"retrying"}


async def test_batches_continue_until_every_expired_row_is_gone(database, companies):
    a, _ = companies
    async with tenant_tx(database.pool, a.id) as conn:
        await conn.executemany(
            "INSERT INTO verb_nonces (company_id, nonce_id, used_at) VALUES ($1, $2, $3)",
            [(a.id, f"n{i}", ago(MARGIN + retention.NONCE_TTL_MAX + 10)) for i in range(7)],
        )
    done = await retention.sweep_company(database.pool, a.id, now=NOW, margin=MARGIN, batch=2)
    assert done == {"verb_nonces": 7}
    # max_batches bounds one round's work; the rest waits for the next round
    async with tenant_tx(database.pool, a.id) as conn:
        await conn.executemany(
            "INSERT INTO verb_nonces (company_id, nonce_id, used_at) VALUES ($1, $2, $3)",
            [(a.id, f"m{i}", ago(MARGIN + retention.NONCE_TTL_MAX + 10)) for i in range(7)],
        )
    assert await retention.sweep_company(database.pool, a.id, now=NOW, margin=MARGIN, batch=2, max_batches=2) == {
        "verb_nonces": 4
    }
    async with tenant_tx(database.pool, a.id) as conn:
        assert await conn.fetchval("SELECT count(*) FROM verb_nonces") == 3


async def test_another_replica_holding_the_lock_skips_the_round(database, db_settings, companies):
    a, _ = companies
    await _seed(database.pool, a.id, "a")
    other = await asyncpg.connect(db_settings.database_url)
    try:
        assert await other.fetchval("SELECT pg_try_advisory_lock($1)", retention.LOCK_KEY)
        assert await retention.run_once(database.pool, now=NOW, margin=MARGIN, batch=1000) is None
        assert "a-expired" in (await _keys(database.pool, a.id))["verb_idempotency"]
    finally:
        await other.close()
    assert (await retention.run_once(database.pool, now=NOW, margin=MARGIN, batch=1000)).done == {
        "acme": {rule.table: 1 for rule in retention.RULES}
    }


async def test_the_running_app_sweeps_on_its_interval(aiohttp_client, database, db_settings, companies):
    """create_app starts the sweeper (real clock): an expired record goes within a few intervals."""
    import asyncio

    from ucp_gateway.app import create_app

    a, _ = companies
    real_now = dt.datetime.now(dt.UTC)
    async with tenant_tx(database.pool, a.id) as conn:
        for key, expires in (("old", real_now - dt.timedelta(days=3)), ("live", real_now + dt.timedelta(days=1))):
            await conn.execute(
                "INSERT INTO verb_idempotency (company_id, principal, verb, key, args_digest, envelope, created_at,"
                " expires_at) VALUES ($1, 'p', 'checkout.create', $2, 'd', '{}', $3, $3)",
                a.id,
                key,
                expires,
            )
    settings = db_settings.model_copy(update={"retention_interval": 0.05})
    await aiohttp_client(create_app(settings, database=database))
    for _ in range(100):
        keys = (await _keys(database.pool, a.id))["verb_idempotency"]
        if keys == {"live"}:
            break
        await asyncio.sleep(0.05)
    assert keys == {"live"}


async def test_interval_zero_starts_no_sweeper(aiohttp_client, database, db_settings, companies):
    import asyncio

    from ucp_gateway.app import create_app

    a, _ = companies
    async with tenant_tx(database.pool, a.id) as conn:
        await conn.execute(
            "INSERT INTO verb_idempotency (company_id, principal, verb, key, args_digest, envelope, created_at,"
            " expires_at) VALUES ($1, 'p', 'checkout.create', 'old', 'd', '{}', $2, $2)",
            a.id,
            dt.datetime.now(dt.UTC) - dt.timedelta(days=3),
        )
    await aiohttp_client(create_app(db_settings.model_copy(update={"retention_interval": 0}), database=database))
    assert not any(t.get_name() == "ucpgw-retention" for t in asyncio.all_tasks())
    await asyncio.sleep(0.2)
    assert (await _keys(database.pool, a.id))["verb_idempotency"] == {"old"}
    with pytest.raises(ValueError):
        Settings(retention_interval=-1)


async def test_a_company_whose_sweep_fails_does_not_stop_the_others(database, db_settings, companies):
    """A database error in one company's sweep of a table (here a trigger refusing its deletes) is
    logged and left for the next round; its other tables and the other companies are swept in the
    same round."""
    a, b = companies
    await _seed(database.pool, a.id, "a")
    await _seed(database.pool, b.id, "b")
    owner = await asyncpg.connect(db_settings.database_url)
    try:
        await owner.execute(
            "CREATE FUNCTION refuse_acme() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF OLD.company_id = '{a.id}' THEN RAISE EXCEPTION 'refused'; END IF; RETURN OLD; END $$;"
            " CREATE TRIGGER refuse_acme BEFORE DELETE ON verb_idempotency FOR EACH ROW EXECUTE FUNCTION refuse_acme()"
        )
    finally:
        await owner.close()
    r = await retention.run_once(database.pool, now=NOW, margin=MARGIN, batch=1000)
    done = r.done
    assert r.left == 1  # acme's verb_idempotency: left for the next round
    assert done["bolt"] == {rule.table: 1 for rule in retention.RULES}
    assert done["acme"] == {rule.table: 1 for rule in retention.RULES if rule.table != "verb_idempotency"}
    assert "a-expired" in (await _keys(database.pool, a.id))["verb_idempotency"]

-- 0040: UCP shopping state: checkout sessions, orders (+ fulfillment events, adjustments), payments
-- of the demo handler (token references only, never credentials), idempotency records of the
-- REST binding, and the order-webhook outbox. Money: bigint minor units + currency.

CREATE TABLE checkout_sessions (
    company_id       uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id               text NOT NULL,
    status           text NOT NULL CHECK (status IN ('incomplete', 'requires_escalation', 'ready_for_complete',
                                                     'complete_in_progress', 'completed', 'canceled')),
    currency         char(3) NOT NULL,
    state            jsonb NOT NULL,            -- the platform's writable state (no credentials)
    body             jsonb NOT NULL,            -- the last rendered checkout resource
    caller           text NOT NULL,             -- platform profile URL that created it
    order_id         text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (company_id, id)
);

CREATE TABLE orders (
    company_id       uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id               text NOT NULL,
    checkout_id      text NOT NULL,
    caller           text NOT NULL,
    currency         char(3) NOT NULL,
    total            bigint NOT NULL CHECK (total >= 0),
    snapshot         jsonb NOT NULL,            -- line items, expectations, totals, label, attribution
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (company_id, id),
    UNIQUE (company_id, checkout_id),          -- one order per checkout, whatever the concurrency
    FOREIGN KEY (company_id, checkout_id) REFERENCES checkout_sessions (company_id, id)
);

-- append-only fulfillment events (UCP order.md: fulfillment.events[])
CREATE TABLE order_events (
    company_id       uuid NOT NULL,
    order_id         text NOT NULL,
    seq              bigint GENERATED ALWAYS AS IDENTITY,
    id               text NOT NULL,
    type             text NOT NULL,
    occurred_at      timestamptz NOT NULL,
    detail           jsonb NOT NULL,           -- line_items, tracking_number, carrier, ...
    PRIMARY KEY (company_id, order_id, id),
    FOREIGN KEY (company_id, order_id) REFERENCES orders (company_id, id) ON DELETE CASCADE
);

CREATE TABLE order_adjustments (
    company_id       uuid NOT NULL,
    order_id         text NOT NULL,
    seq              bigint GENERATED ALWAYS AS IDENTITY,
    id               text NOT NULL,
    type             text NOT NULL,
    status           text NOT NULL CHECK (status IN ('pending', 'completed', 'failed')),
    occurred_at      timestamptz NOT NULL,
    detail           jsonb NOT NULL,           -- line_items, totals, description
    PRIMARY KEY (company_id, order_id, id),
    FOREIGN KEY (company_id, order_id) REFERENCES orders (company_id, id) ON DELETE CASCADE
);

-- A charge by the demo payment handler. token_ref is the handler's reference, never the credential.
CREATE TABLE payments (
    company_id       uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id               text NOT NULL,
    checkout_id      text NOT NULL,
    order_id         text,
    handler_id       text NOT NULL,
    instrument_id    text NOT NULL,
    token_ref        text NOT NULL,
    amount           bigint NOT NULL CHECK (amount >= 0),
    currency         char(3) NOT NULL,
    status           text NOT NULL CHECK (status IN ('captured', 'declined')),
    created_at       timestamptz NOT NULL,
    PRIMARY KEY (company_id, id)
);

-- Idempotency records of POST/PUT (UCP checkout-rest.md; kept >= 24 h). body = exact response bytes.
CREATE TABLE commerce_idempotency (
    company_id       uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    caller           text NOT NULL,
    key              text NOT NULL,
    fingerprint      bytea NOT NULL,
    status_code      integer NOT NULL,
    content_type     text NOT NULL,
    body             bytea NOT NULL,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (company_id, caller, key)
);
CREATE INDEX commerce_idempotency_expiry ON commerce_idempotency (expires_at);

-- Order webhooks, written in the order's transaction. id = Webhook-Id; created_at = Webhook-Timestamp.
CREATE TABLE webhook_outbox (
    company_id       uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id               uuid NOT NULL,
    order_id         text NOT NULL,
    event_type       text NOT NULL,
    caller           text NOT NULL,            -- platform profile URL (its order webhook_url is the target)
    target_url       text,                     -- resolved at first delivery attempt
    payload          bytea NOT NULL,           -- the exact body sent on every retry (full order)
    created_at       timestamptz NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    delivered_at     timestamptz,
    last_error       text,
    PRIMARY KEY (company_id, id)
);

SELECT tenant_table(t) FROM unnest(ARRAY[
    'checkout_sessions', 'orders', 'order_events', 'order_adjustments', 'payments', 'commerce_idempotency', 'webhook_outbox'
]::regclass[]) AS t;
GRANT SELECT, INSERT, UPDATE, DELETE ON
    checkout_sessions, orders, order_events, order_adjustments, payments, commerce_idempotency, webhook_outbox
    TO ucp_app;

-- Delivery queue: ids and due times only (no payload). A tenant sees its own rows; the delivery
-- worker scans across tenants only in an explicit platform_scan_tx(pool, 'webhook_queue'), then
-- reads each event inside its own tenant context. No context at all sees nothing.
CREATE TABLE webhook_queue (
    company_id       uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    event_id         uuid NOT NULL,
    next_attempt_at  timestamptz NOT NULL,
    PRIMARY KEY (company_id, event_id)
);
CREATE INDEX webhook_queue_due ON webhook_queue (next_attempt_at);
ALTER TABLE webhook_queue ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_queue FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_or_worker ON webhook_queue
    USING (company_id = app_company_id() OR current_setting('app.platform_scan', true) = 'webhook_queue')
    WITH CHECK (company_id = app_company_id() OR current_setting('app.platform_scan', true) = 'webhook_queue');
GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_queue TO ucp_app;

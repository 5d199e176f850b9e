-- 0031: tables behind the demo verbs (issue 5): CRM contacts, back-office orders and refunds,
-- the event stream for subscribe/poll, subscriptions and saved macros. All tenant tables.
-- (The UCP checkout/order tables of the shopping work are separate; these are the staff side.)

CREATE TABLE crm_contacts (
    company_id      uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id              bigint GENERATED ALWAYS AS IDENTITY,
    customer_id     text,
    name            text NOT NULL,
    email           text NOT NULL,
    phone           text,
    status          text NOT NULL DEFAULT 'active' CHECK (status IN ('lead', 'active', 'vip', 'lost')),
    lifecycle_stage text NOT NULL DEFAULT 'customer',
    notes           text NOT NULL DEFAULT '',
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (company_id, id)
);

CREATE TABLE sales_orders (
    company_id       uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id               text NOT NULL,
    customer_id      text NOT NULL,
    currency         char(3) NOT NULL DEFAULT 'USD',
    discount_code    text,
    shipping_rate_id text,
    status           text NOT NULL CHECK (status IN ('paid', 'partially_refunded', 'refunded', 'fulfilled')),
    paid_amount      bigint NOT NULL CHECK (paid_amount >= 0),            -- minor units
    refunded_amount  bigint NOT NULL DEFAULT 0 CHECK (refunded_amount >= 0),
    created_at       timestamptz NOT NULL,
    PRIMARY KEY (company_id, id),
    CHECK (refunded_amount <= paid_amount)
);

CREATE TABLE sales_order_lines (
    company_id  uuid NOT NULL,
    order_id    text NOT NULL,
    line_no     integer NOT NULL,
    product_id  text NOT NULL,
    quantity    integer NOT NULL CHECK (quantity > 0),
    unit_price  bigint NOT NULL CHECK (unit_price >= 0),                  -- minor units
    PRIMARY KEY (company_id, order_id, line_no),
    FOREIGN KEY (company_id, order_id) REFERENCES sales_orders (company_id, id) ON DELETE CASCADE
);

CREATE TABLE refunds (
    company_id  uuid NOT NULL,
    id          text NOT NULL,
    order_id    text NOT NULL,
    amount      bigint NOT NULL CHECK (amount > 0),                       -- minor units
    currency    char(3) NOT NULL,
    reason      text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (company_id, id),
    FOREIGN KEY (company_id, order_id) REFERENCES sales_orders (company_id, id) ON DELETE CASCADE
);

-- Business events written by write verbs in their own transaction; subscribe/poll read them.
CREATE TABLE agent_events (
    company_id  uuid NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    type        text NOT NULL,
    entity_type text NOT NULL,
    entity_id   text NOT NULL,
    data        jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (company_id, seq)
);

CREATE TABLE agent_subscriptions (
    company_id     uuid NOT NULL,
    id             text NOT NULL,
    principal      text NOT NULL,
    filters        jsonb NOT NULL,
    created_at     timestamptz NOT NULL,
    last_polled_at timestamptz NOT NULL,
    PRIMARY KEY (company_id, id)
);

CREATE TABLE macros (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id          text NOT NULL,
    name        text NOT NULL,
    steps       jsonb NOT NULL,                                          -- [{verb, args}]
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (company_id, id)
);

SELECT tenant_table(t) FROM unnest(ARRAY[
    'crm_contacts', 'sales_orders', 'sales_order_lines', 'refunds', 'agent_events', 'agent_subscriptions', 'macros'
]::regclass[]) AS t;
GRANT SELECT, INSERT, UPDATE, DELETE ON
    crm_contacts, sales_orders, sales_order_lines, refunds, agent_events, agent_subscriptions, macros
    TO ucp_app;

-- 0002: the merchant catalogue the demo imports (flower shop): products, inventory, discounts,
-- promotions, shipping rates, customers, addresses, payment instruments. All tenant tables.

CREATE TABLE products (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id          text NOT NULL,
    title       text NOT NULL,
    price       bigint NOT NULL CHECK (price >= 0),          -- minor units
    currency    char(3) NOT NULL DEFAULT 'USD',
    image_url   text,
    PRIMARY KEY (company_id, id)
);

CREATE TABLE inventory (
    company_id  uuid NOT NULL,
    product_id  text NOT NULL,
    quantity    integer NOT NULL CHECK (quantity >= 0),
    PRIMARY KEY (company_id, product_id),
    FOREIGN KEY (company_id, product_id) REFERENCES products (company_id, id) ON DELETE CASCADE
);

CREATE TABLE discounts (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    code        text NOT NULL CHECK (code = upper(code)),   -- stored upper-case; lookups are case-insensitive
    type        text NOT NULL CHECK (type IN ('percentage', 'fixed_amount')),
    value       bigint NOT NULL CHECK (value > 0),          -- percent, or minor units
    currency    char(3),                                    -- for fixed_amount
    description text NOT NULL DEFAULT '',
    PRIMARY KEY (company_id, code)
);

CREATE TABLE promotions (
    company_id        uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id                text NOT NULL,
    type              text NOT NULL CHECK (type IN ('free_shipping')),
    min_subtotal      bigint CHECK (min_subtotal >= 0),     -- minor units
    eligible_item_ids text[] NOT NULL DEFAULT '{}',
    description       text NOT NULL DEFAULT '',
    PRIMARY KEY (company_id, id)
);

CREATE TABLE shipping_rates (
    company_id    uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id            text NOT NULL,
    country_code  text NOT NULL,                            -- ISO 3166-1 alpha-2, or 'default'
    service_level text NOT NULL,
    price         bigint NOT NULL CHECK (price >= 0),       -- minor units
    currency      char(3) NOT NULL DEFAULT 'USD',
    title         text NOT NULL,
    PRIMARY KEY (company_id, id)
);

CREATE TABLE customers (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id          text NOT NULL,
    name        text NOT NULL,
    email       text NOT NULL,
    PRIMARY KEY (company_id, id)
);
CREATE UNIQUE INDEX customers_email ON customers (company_id, lower(email));

CREATE TABLE addresses (
    company_id     uuid NOT NULL,
    id             text NOT NULL,
    customer_id    text NOT NULL,
    street_address text NOT NULL,
    city           text NOT NULL,
    state          text NOT NULL,
    postal_code    text NOT NULL,
    country        text NOT NULL,
    PRIMARY KEY (company_id, id),
    FOREIGN KEY (company_id, customer_id) REFERENCES customers (company_id, id) ON DELETE CASCADE
);

-- Demo payment instruments: the token decides the demo handler's answer. Never real card data.
CREATE TABLE payment_instruments (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id          text NOT NULL,
    type        text NOT NULL,
    brand       text NOT NULL,
    last_digits text NOT NULL CHECK (last_digits ~ '^[0-9]{4}$'),
    token       text NOT NULL,
    handler_id  text NOT NULL,
    PRIMARY KEY (company_id, id)
);

SELECT tenant_table(t) FROM unnest(ARRAY[
    'products', 'inventory', 'discounts', 'promotions', 'shipping_rates', 'customers', 'addresses', 'payment_instruments'
]::regclass[]) AS t;
GRANT SELECT, INSERT, UPDATE, DELETE ON
    products, inventory, discounts, promotions, shipping_rates, customers, addresses, payment_instruments
    TO ucp_app;

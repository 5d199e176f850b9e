-- 0066: carts (UCP dev.ucp.shopping.cart) and the link from a cart to the checkout made from it.
--
-- A cart row keeps the platform's writable state (line items, context, buyer, discount codes);
-- its totals are priced on every read by the checkout's own pricing (estimates, never stored).
-- cancel_cart deletes the row (UCP: later operations answer not_found).
--
-- cart_checkouts: at most one open checkout per cart (UCP cart "Cart-to-Checkout Conversion": an
-- incomplete checkout of the cart MUST be returned instead of a new one, whatever the
-- Idempotency-Key). The primary key holds the rule; a link to a checkout that is completed,
-- canceled or expired is replaced. It is a table of its own so that checkout_sessions keeps its
-- indexes (a partial unique index over its status would end HOT updates of every checkout).
CREATE TABLE carts (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id          text NOT NULL,
    caller      text NOT NULL,              -- the buyer agent identity that created it
    state       jsonb NOT NULL,             -- {line_items, context?, buyer?, discounts?, attribution?}
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (company_id, id)
);
CREATE INDEX carts_expires ON carts USING brin (expires_at);

CREATE TABLE cart_checkouts (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    cart_id     text NOT NULL,
    checkout_id text NOT NULL,
    PRIMARY KEY (company_id, cart_id)
);

SELECT tenant_table(t) FROM unnest(ARRAY['carts', 'cart_checkouts']::regclass[]) AS t;
GRANT SELECT, INSERT, UPDATE, DELETE ON carts, cart_checkouts TO ucp_app;

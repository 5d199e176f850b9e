-- 0075: the buyer's confirmation page at a checkout's continue_url.
-- checkout_page_tokens: one row per confirmation form shown. The form carries a random
-- confirmation token and a CSRF token (also in an HttpOnly cookie); only their SHA-256 are stored.
-- A token is bound to one checkout and to the digest of what the page showed (line items and
-- totals), lives a few minutes and is spent by the one POST that uses it (used_at).
CREATE TABLE checkout_page_tokens (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL CHECK (length(token_hash) = 32),
    checkout_id text NOT NULL CHECK (length(checkout_id) BETWEEN 1 AND 100),
    csrf_hash   bytea NOT NULL CHECK (length(csrf_hash) = 32),
    digest      text NOT NULL CHECK (length(digest) = 64),
    issued_at   timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    PRIMARY KEY (company_id, token_hash),
    CHECK (expires_at > issued_at)
);
CREATE INDEX checkout_page_tokens_expiry ON checkout_page_tokens USING brin (expires_at);
SELECT tenant_table('checkout_page_tokens');
GRANT SELECT, INSERT, UPDATE, DELETE ON checkout_page_tokens TO ucp_app;

-- checkout_confirmations: what the buyer confirmed on the page (the checkout's digest and total
-- at that moment). complete_checkout honours a confirmation only for the same digest: a checkout
-- changed after the buyer's confirmation needs a new one.
CREATE TABLE checkout_confirmations (
    company_id   uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    checkout_id  text NOT NULL CHECK (length(checkout_id) BETWEEN 1 AND 100),
    digest       text NOT NULL CHECK (length(digest) = 64),
    total        bigint NOT NULL,
    reason       text NOT NULL CHECK (length(reason) BETWEEN 1 AND 100),
    confirmed_at timestamptz NOT NULL,
    PRIMARY KEY (company_id, checkout_id, digest)
);
CREATE INDEX checkout_confirmations_age ON checkout_confirmations USING brin (confirmed_at);
SELECT tenant_table('checkout_confirmations');
GRANT SELECT, INSERT, DELETE ON checkout_confirmations TO ucp_app;

-- 0077: staff browser sessions of the admin pages (sign in with a staff API token). The cookie holds
-- the session token; only its SHA-256 is stored, and the CSRF token of its forms is derived from it.
-- A session lives until expires_at, its sign-out (revoked_at), or the revocation of the admin token
-- it was opened with (the lookup joins admin_tokens), whichever comes first.
CREATE TABLE staff_sessions (
    id             uuid PRIMARY KEY,
    company_id     uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    token_hash     bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    admin_token_id uuid NOT NULL,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    revoked_at     timestamptz,
    CHECK (expires_at > created_at)
);
CREATE INDEX staff_sessions_expiry ON staff_sessions USING brin (expires_at);
SELECT tenant_table('staff_sessions');
GRANT SELECT, INSERT, UPDATE, DELETE ON staff_sessions TO ucp_app;

-- 0050: WebMCP browser sessions (issue 7). The cookie holds the session token; only its SHA-256 is
-- stored. A session binds one company and one user (subject + role). The CSRF token is derived
-- from the session token (HMAC), so it is not stored.
CREATE TABLE webmcp_sessions (
    id          uuid PRIMARY KEY,
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    subject     text NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
    role        text NOT NULL CHECK (role IN ('read_only', 'employee', 'admin', 'owner')),
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    CHECK (expires_at > created_at)
);
CREATE INDEX webmcp_sessions_company ON webmcp_sessions (company_id, expires_at);
SELECT tenant_table('webmcp_sessions');
GRANT SELECT, INSERT, UPDATE, DELETE ON webmcp_sessions TO ucp_app;

-- 0071: platform credentials (docs/access.md): API keys and OAuth 2.0 clients of a company's
-- partners (a registered platform profile), and the client-credentials access tokens this gateway
-- issues. Secrets and tokens are stored as SHA-256 hex only (shown once); a revoked credential
-- revokes its tokens (checked on every use).
CREATE TABLE platform_credentials (
    company_id  uuid NOT NULL,
    id          text NOT NULL CHECK (id ~ '^(ak|oc)_[0-9a-f]{16}$'),
    kind        text NOT NULL CHECK (kind IN ('api_key', 'oauth_client')),
    profile_url text NOT NULL,
    secret_hash text CHECK (secret_hash IS NULL OR secret_hash ~ '^[0-9a-f]{64}$'),
    jwks        jsonb CHECK (jwks IS NULL OR jsonb_typeof(jwks) = 'object'),
    label       text CHECK (label IS NULL OR length(label) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    PRIMARY KEY (company_id, id),
    FOREIGN KEY (company_id, profile_url) REFERENCES partners (company_id, profile_url) ON DELETE CASCADE,
    CHECK (kind = 'oauth_client' OR secret_hash IS NOT NULL),
    CHECK (secret_hash IS NOT NULL OR jwks IS NOT NULL)
);
CREATE UNIQUE INDEX platform_credentials_secret ON platform_credentials (company_id, secret_hash)
    WHERE kind = 'api_key';
SELECT tenant_table('platform_credentials'::regclass);
GRANT SELECT, INSERT, UPDATE ON platform_credentials TO ucp_app;

CREATE TABLE oauth_access_tokens (
    company_id uuid NOT NULL,
    token_hash text NOT NULL CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    client_id  text NOT NULL,
    scope      text NOT NULL,
    issued_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    PRIMARY KEY (company_id, token_hash),
    FOREIGN KEY (company_id, client_id) REFERENCES platform_credentials (company_id, id) ON DELETE CASCADE
);
CREATE INDEX oauth_access_tokens_expiry ON oauth_access_tokens USING brin (expires_at);
SELECT tenant_table('oauth_access_tokens'::regclass);
GRANT SELECT, INSERT, UPDATE, DELETE ON oauth_access_tokens TO ucp_app;

-- 0110: two more partner credentials (docs/access.md): a Web Bot Auth key directory origin
-- (kind web_bot_auth, id wb_...) and an mTLS client certificate named by SHA-256 fingerprint or
-- subject (kind mtls_cert, id mc_...), both in `identity`, neither holding a secret. A live
-- identity names one partner per company; revoking is final, as for the other kinds.
ALTER TABLE platform_credentials ADD COLUMN identity text
    CHECK (identity IS NULL OR length(identity) BETWEEN 1 AND 2048);
ALTER TABLE platform_credentials
    DROP CONSTRAINT platform_credentials_id_check,
    DROP CONSTRAINT platform_credentials_kind_check,
    DROP CONSTRAINT platform_credentials_check,
    DROP CONSTRAINT platform_credentials_check1;
ALTER TABLE platform_credentials
    ADD CONSTRAINT platform_credentials_id_check CHECK (id ~ '^(ak|oc|wb|mc)_[0-9a-f]{16}$'),
    ADD CONSTRAINT platform_credentials_kind_check
        CHECK (kind IN ('api_key', 'oauth_client', 'web_bot_auth', 'mtls_cert')),
    ADD CONSTRAINT platform_credentials_proof_check CHECK (CASE kind
        WHEN 'api_key' THEN secret_hash IS NOT NULL AND identity IS NULL
        WHEN 'oauth_client' THEN (secret_hash IS NOT NULL OR jwks IS NOT NULL) AND identity IS NULL
        ELSE identity IS NOT NULL AND secret_hash IS NULL AND jwks IS NULL END);
CREATE UNIQUE INDEX platform_credentials_identity ON platform_credentials (company_id, kind, identity)
    WHERE identity IS NOT NULL AND revoked_at IS NULL;

-- 0010: per-company signing keys (EC P-256 JWK, kid = RFC 7638 thumbprint), their audit events,
-- and company admin API tokens (stored as SHA-256 hashes). Owned by ucp_gateway.keys.

CREATE TABLE company_keys (
    company_id        uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    kid               text NOT NULL CHECK (kid ~ '^[A-Za-z0-9_-]{43}$'),
    state             text NOT NULL CHECK (state IN ('pending', 'active', 'rotating', 'retired', 'compromised')),
    alg               text NOT NULL DEFAULT 'ES256' CHECK (alg = 'ES256'),
    public_jwk        jsonb NOT NULL,
    -- AES-256-GCM record {"v","kek_id","nonce","ct"}; AAD binds v, company_id, kid, kek_id
    private_enc       jsonb NOT NULL,
    kek_id            text NOT NULL,
    created_at        timestamptz NOT NULL,
    state_changed_at  timestamptz NOT NULL,
    PRIMARY KEY (company_id, kid)
);
CREATE UNIQUE INDEX company_keys_kid ON company_keys (kid);
CREATE UNIQUE INDEX company_keys_one_active ON company_keys (company_id) WHERE state = 'active';
CREATE INDEX company_keys_kek ON company_keys (kek_id);
SELECT tenant_table('company_keys');
GRANT SELECT, INSERT, UPDATE ON company_keys TO ucp_app;

-- Every key transition: who and why. Append-only for the application role.
CREATE TABLE key_events (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq         bigint GENERATED ALWAYS AS IDENTITY,  -- total order of events
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    kid         text NOT NULL,
    from_state  text,
    to_state    text NOT NULL,
    event       text NOT NULL,
    actor       text NOT NULL,
    reason      text NOT NULL,
    at          timestamptz NOT NULL
);
CREATE INDEX key_events_company ON key_events (company_id, at);
SELECT tenant_table('key_events');
GRANT SELECT, INSERT ON key_events TO ucp_app;

CREATE TABLE admin_tokens (
    id           uuid PRIMARY KEY,
    company_id   uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    role         text NOT NULL CHECK (role IN ('read_only', 'employee', 'admin', 'owner')),
    token_hash   bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    label        text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    revoked_at   timestamptz
);
CREATE INDEX admin_tokens_company ON admin_tokens (company_id);
SELECT tenant_table('admin_tokens');
GRANT SELECT, INSERT, UPDATE ON admin_tokens TO ucp_app;

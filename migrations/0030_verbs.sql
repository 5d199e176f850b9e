-- 0030: the verb runtime (issue 5): hash-chained append-only audit log, idempotency records,
-- daily caps, single-use consent nonces, reversals, and a simple staff-token table used by the
-- HTTP front door until the admin API tokens of the signatures work are merged.

CREATE SEQUENCE verb_audit_id_seq;
GRANT USAGE ON SEQUENCE verb_audit_id_seq TO ucp_app;

-- One row per dispatch, allowed or denied. `entry` is the canonical record; the plain columns are
-- copies for indexing that `audit verify` checks against it. row_hash = sha256(prev_hash ||
-- int8(seq) || int8(audit_id) || canonical_json(entry)), chained per company by seq.
CREATE TABLE verb_audit_log (
    audit_id    bigint PRIMARY KEY,
    company_id  uuid NOT NULL,
    seq         bigint NOT NULL,
    created_at  timestamptz NOT NULL,
    verb        text NOT NULL,
    decision    text NOT NULL CHECK (decision IN ('allowed', 'denied', 'pending', 'failed', 'replayed')),
    status      text NOT NULL,
    subject     text NOT NULL,
    entry       jsonb NOT NULL,
    prev_hash   bytea NOT NULL,
    row_hash    bytea NOT NULL,
    UNIQUE (company_id, seq)
);
CREATE INDEX verb_audit_log_verb ON verb_audit_log (company_id, verb, audit_id);
CREATE INDEX verb_audit_log_time ON verb_audit_log (company_id, created_at);

-- The head of each company's chain; its row lock serialises appends per company.
CREATE TABLE verb_audit_heads (
    company_id uuid PRIMARY KEY,
    seq        bigint NOT NULL,
    head_hash  bytea NOT NULL
);

-- Append-only, for every role: the owner and the app role alike. Only a superuser who disables
-- the trigger can edit a row, and `ucp-gateway audit verify` then names the first broken row.
CREATE FUNCTION verb_audit_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'verb_audit_log is append-only (% refused)', TG_OP USING ERRCODE = '42501';
END $$;
CREATE TRIGGER verb_audit_no_update BEFORE UPDATE OR DELETE ON verb_audit_log
    FOR EACH ROW EXECUTE FUNCTION verb_audit_immutable();
CREATE TRIGGER verb_audit_no_truncate BEFORE TRUNCATE ON verb_audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION verb_audit_immutable();

-- Append one row in one round trip; runs as the caller, so RLS applies.
CREATE FUNCTION verb_audit_append(p_company uuid, p_created_at timestamptz, p_verb text, p_decision text,
                                  p_status text, p_subject text, p_entry jsonb, p_canonical text,
                                  OUT audit_id bigint, OUT seq bigint)
    LANGUAGE plpgsql AS $$
DECLARE
    v_prev bytea;
    v_hash bytea;
BEGIN
    INSERT INTO verb_audit_heads AS h (company_id, seq, head_hash)
        VALUES (p_company, 1, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
        ON CONFLICT (company_id) DO UPDATE SET seq = h.seq + 1
        RETURNING h.seq, h.head_hash INTO seq, v_prev;
    audit_id := nextval('verb_audit_id_seq');
    v_hash := sha256(v_prev || int8send(seq) || int8send(audit_id) || convert_to(p_canonical, 'UTF8'));
    INSERT INTO verb_audit_log (audit_id, company_id, seq, created_at, verb, decision, status, subject,
                                entry, prev_hash, row_hash)
        VALUES (audit_id, p_company, seq, p_created_at, p_verb, p_decision, p_status, p_subject,
                p_entry, v_prev, v_hash);
    UPDATE verb_audit_heads SET head_hash = v_hash WHERE company_id = p_company;
END $$;
GRANT EXECUTE ON FUNCTION verb_audit_append(uuid, timestamptz, text, text, text, text, jsonb, text) TO ucp_app;

-- Idempotency records: scope (company, principal, verb, key); kept 24 h. The row is inserted in
-- the executing transaction, so a concurrent duplicate waits on it and then replays.
CREATE TABLE verb_idempotency (
    company_id  uuid NOT NULL,
    principal   text NOT NULL,
    verb        text NOT NULL,
    key         text NOT NULL,
    args_digest text NOT NULL,
    envelope    jsonb,
    audit_id    bigint,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (company_id, principal, verb, key)
);
CREATE INDEX verb_idempotency_expiry ON verb_idempotency (company_id, expires_at);

-- Company-wide daily caps per risk class (UTC day).
CREATE TABLE verb_daily_usage (
    company_id uuid NOT NULL,
    cap_class  text NOT NULL,
    day        date NOT NULL,
    used       integer NOT NULL CHECK (used >= 0),
    PRIMARY KEY (company_id, cap_class, day)
);

-- Per-principal limits (buyer agents): calls and amount (minor units) per UTC day.
CREATE TABLE verb_principal_usage (
    company_id uuid NOT NULL,
    principal  text NOT NULL,
    limit_key  text NOT NULL,
    day        date NOT NULL,
    calls      integer NOT NULL DEFAULT 0,
    amount     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (company_id, principal, limit_key, day)
);

-- Consent nonces consumed (single use).
CREATE TABLE verb_nonces (
    company_id uuid NOT NULL,
    nonce_id   text NOT NULL,
    used_at    timestamptz NOT NULL,
    PRIMARY KEY (company_id, nonce_id)
);

-- One revert per audited action (the audit log itself never changes).
CREATE TABLE verb_reversals (
    company_id  uuid NOT NULL,
    audit_id    bigint NOT NULL,
    reverted_at timestamptz NOT NULL,
    reverted_by text NOT NULL,
    PRIMARY KEY (company_id, audit_id)
);

-- Staff bearer tokens (sha-256 of the token only), role-bound.

SELECT tenant_table(t) FROM unnest(ARRAY[
    'verb_audit_log', 'verb_audit_heads', 'verb_idempotency', 'verb_daily_usage', 'verb_principal_usage', 'verb_nonces', 'verb_reversals'
]::regclass[]) AS t;
GRANT SELECT, INSERT ON verb_audit_log TO ucp_app;
GRANT SELECT, INSERT, UPDATE ON verb_audit_heads TO ucp_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON verb_idempotency, verb_daily_usage, verb_principal_usage, verb_nonces
    TO ucp_app;
GRANT SELECT, INSERT ON verb_reversals TO ucp_app;

-- 0115: consent asked inside an MCP tool call (elicitation). One row per question the gateway asks
-- a person through the agent's UI: who asked (caller, the principal's key), which tool, the digest
-- of its arguments, and what resuming the call needs (state: the checkout id and digest, the
-- idempotency key, a verb's nonce). Only the SHA-256 of the random id travels back and forth
-- (the 2026-07-28 requestState, or the 2025-11-25 elicitation request's JSON-RPC id). answer: the
-- person's answer delivered by the client's response POST (handshake revisions, any replica);
-- spent_at: the call resumed with it, once.
CREATE TABLE mcp_elicitations (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id_hash     bytea NOT NULL CHECK (length(id_hash) = 32),
    caller      text NOT NULL CHECK (length(caller) BETWEEN 1 AND 2200),
    tool        text NOT NULL CHECK (length(tool) BETWEEN 1 AND 200),
    args_digest text NOT NULL CHECK (length(args_digest) = 64),
    state       jsonb NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    answer      jsonb,
    answered_at timestamptz,
    spent_at    timestamptz,
    PRIMARY KEY (company_id, id_hash),
    CHECK (expires_at > created_at)
);
CREATE INDEX mcp_elicitations_expiry ON mcp_elicitations USING brin (expires_at);
SELECT tenant_table('mcp_elicitations');
GRANT SELECT, INSERT, UPDATE, DELETE ON mcp_elicitations TO ucp_app;
-- the retention sweeper (role ucp_scan, scope 'retention') deletes them after expires_at
GRANT SELECT (company_id, expires_at) ON mcp_elicitations TO ucp_scan;
CREATE POLICY retention_scan ON mcp_elicitations FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');

-- 0078: approvals of human-only verbs (WRITE_FINANCIAL, IRREVERSIBLE; solid-verbs digest §8 G3).
-- A bearer-token caller (agent, CLI, MCP, WebMCP) that asks for such a verb gets a pending
-- approval and its URL; a person signed in to the staff pages with another credential confirms
-- it there with the typed phrase, and the verb runs once (executed_audit_id). The arguments are
-- kept to run exactly what was asked; args_digest is what the typed phrase and nonce bind.
CREATE TABLE verb_approvals (
    id               text NOT NULL CHECK (id ~ '^apr_[0-9a-f]{32}$'),
    company_id       uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    verb             text NOT NULL CHECK (length(verb) BETWEEN 1 AND 200),
    args             jsonb NOT NULL,
    args_digest      text NOT NULL CHECK (length(args_digest) = 64),
    risk_class       text NOT NULL,
    phrase           text NOT NULL,
    requested_by     text NOT NULL,
    requested_via    text NOT NULL,
    request_audit_id bigint,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'executed', 'declined', 'failed')),
    decided_by       text,
    decided_at       timestamptz,
    executed_audit_id bigint,
    PRIMARY KEY (company_id, id),
    CHECK (expires_at > created_at)
);
CREATE INDEX verb_approvals_open ON verb_approvals (company_id, created_at DESC) WHERE status = 'pending';
CREATE INDEX verb_approvals_expiry ON verb_approvals USING brin (expires_at);
SELECT tenant_table('verb_approvals');
GRANT SELECT, INSERT, UPDATE, DELETE ON verb_approvals TO ucp_app;

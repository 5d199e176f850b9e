-- 0070: signature policy `log` (serve what `required` would refuse, as anonymous, and count it) and
-- its counters: one row per company, UTC day and refusal reason (a wire code such as
-- signature_missing), incremented by the gateway, read by company admins.
ALTER TABLE companies DROP CONSTRAINT companies_signature_policy_check;
ALTER TABLE companies ADD CONSTRAINT companies_signature_policy_check
    CHECK (signature_policy IN ('required', 'optional', 'log', 'off'));

CREATE TABLE access_policy_counts (
    company_id uuid NOT NULL,
    day        date NOT NULL,
    reason     text NOT NULL CHECK (length(reason) BETWEEN 1 AND 64),
    count      bigint NOT NULL CHECK (count > 0),
    PRIMARY KEY (company_id, day, reason)
);
SELECT tenant_table('access_policy_counts'::regclass);
GRANT SELECT, INSERT, UPDATE ON access_policy_counts TO ucp_app;

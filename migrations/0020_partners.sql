-- 0020: partner registry (known platform profile URLs per company) and each company's trust policy.
-- A verified agent identity (its platform profile URL) maps to a role and tier through partners;
-- unknown agents get partner_policies.default_role, or are refused in allowlist mode.

CREATE TABLE partner_policies (
    company_id   uuid PRIMARY KEY REFERENCES companies (id) ON DELETE CASCADE,
    trust_mode   text NOT NULL DEFAULT 'open' CHECK (trust_mode IN ('open', 'allowlist')),
    default_role text NOT NULL DEFAULT 'read_only'
                 CHECK (default_role IN ('buyer', 'read_only', 'employee', 'admin', 'owner')),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
SELECT tenant_table('partner_policies');
GRANT SELECT, INSERT, UPDATE, DELETE ON partner_policies TO ucp_app;

CREATE TABLE partners (
    company_id   uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    profile_url  text NOT NULL CHECK (length(profile_url) BETWEEN 9 AND 2048),
    role         text NOT NULL CHECK (role IN ('buyer', 'read_only', 'employee', 'admin', 'owner')),
    tier         text NOT NULL DEFAULT 'starter' CHECK (tier IN ('starter', 'growth', 'pro', 'enterprise')),
    display_name text CHECK (display_name IS NULL OR length(display_name) BETWEEN 1 AND 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (company_id, profile_url)
);
SELECT tenant_table('partners');
GRANT SELECT, INSERT, UPDATE, DELETE ON partners TO ucp_app;

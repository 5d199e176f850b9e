-- 0001: roles, the tenant-context function, platform, companies, hostnames, sub-agents.
-- Conventions for every later migration (docs/architecture.md, "Data"):
--   * a tenant table has company_id uuid NOT NULL and is passed to tenant_table(), which sets RLS
--     ENABLED and FORCED with the policy tenant_isolation (company_id = app_company_id());
--   * privileges are granted to the group role ucp_app, never to a login role;
--   * money is bigint minor units beside a currency char(3).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ucp_app') THEN
        CREATE ROLE ucp_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
EXCEPTION WHEN duplicate_object THEN NULL;  -- another database on this cluster created it first
END $$;

REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO ucp_app;
GRANT SELECT ON schema_migrations TO ucp_app;

-- The tenant of the current transaction, or NULL when none is set (tenant_tx uses SET LOCAL).
-- NULLIF: after a SET LOCAL ends, the custom setting reads as '' rather than NULL.
CREATE FUNCTION app_company_id() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('app.company_id', true), '')::uuid $$;
GRANT EXECUTE ON FUNCTION app_company_id() TO ucp_app;

-- Make a table a tenant table: RLS enabled and FORCED, policy tenant_isolation on company_id.
-- Owner-only (migrations call it); privileges stay explicit in each migration.
CREATE FUNCTION tenant_table(t regclass) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %s USING (company_id = app_company_id()) '
                   'WITH CHECK (company_id = app_company_id())', t);
END $$;
REVOKE ALL ON FUNCTION tenant_table(regclass) FROM PUBLIC;

-- The platform node: exactly one row.
CREATE TABLE platform (
    id           smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    name         text NOT NULL,
    settings     jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO platform (id, name) VALUES (1, 'ucp-gateway platform');
GRANT SELECT, INSERT, UPDATE ON platform TO ucp_app;

-- Companies are the tenants. Everyone may read the directory (host resolution, agent graph);
-- a row may be written only inside its own tenant context.
CREATE TABLE companies (
    id               uuid PRIMARY KEY,
    slug             text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    display_name     text NOT NULL CHECK (length(display_name) BETWEEN 1 AND 200),
    tier             text NOT NULL DEFAULT 'starter'
                     CHECK (tier IN ('starter', 'growth', 'pro', 'enterprise')),
    signature_policy text NOT NULL DEFAULT 'required'
                     CHECK (signature_policy IN ('required', 'optional', 'off')),
    settings         jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE companies ENABLE ROW LEVEL SECURITY;
ALTER TABLE companies FORCE ROW LEVEL SECURITY;
CREATE POLICY directory_read ON companies FOR SELECT USING (true);
CREATE POLICY own_insert ON companies FOR INSERT WITH CHECK (id = app_company_id());
CREATE POLICY own_update ON companies FOR UPDATE USING (id = app_company_id()) WITH CHECK (id = app_company_id());
CREATE POLICY own_delete ON companies FOR DELETE USING (id = app_company_id());
GRANT SELECT, INSERT, UPDATE, DELETE ON companies TO ucp_app;

-- Hostnames bound to a company (lower-case, no port). A host bound to none is the platform node.
CREATE TABLE company_hosts (
    hostname   text PRIMARY KEY CHECK (hostname = lower(hostname) AND hostname !~ ':\d+$' AND length(hostname) > 0),
    company_id uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE
);
CREATE INDEX company_hosts_company ON company_hosts (company_id);
ALTER TABLE company_hosts ENABLE ROW LEVEL SECURITY;
ALTER TABLE company_hosts FORCE ROW LEVEL SECURITY;
CREATE POLICY directory_read ON company_hosts FOR SELECT USING (true);
CREATE POLICY own_insert ON company_hosts FOR INSERT WITH CHECK (company_id = app_company_id());
CREATE POLICY own_update ON company_hosts FOR UPDATE USING (company_id = app_company_id())
    WITH CHECK (company_id = app_company_id());
CREATE POLICY own_delete ON company_hosts FOR DELETE USING (company_id = app_company_id());
GRANT SELECT, INSERT, UPDATE, DELETE ON company_hosts TO ucp_app;

-- Sub-agents of a company (sales, ar, ap, commissions, service, compliance, marketing, ops).
CREATE TABLE subagents (
    company_id uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    name       text NOT NULL
               CHECK (name IN ('sales', 'ar', 'ap', 'commissions', 'service', 'compliance', 'marketing', 'ops')),
    enabled    boolean NOT NULL DEFAULT true,
    settings   jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (company_id, name)
);
SELECT tenant_table('subagents');
GRANT SELECT, INSERT, UPDATE, DELETE ON subagents TO ucp_app;

-- 0079: the retention sweeper's scan (role ucp_scan, migration 0090) sees when staff sessions and
-- approvals of human-only verbs stop counting: both at expires_at (an approval's outcome stays in
-- the audit chain: its rows name the approval id). Only company_id and the time, under 'retention'.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ucp_scan') THEN
        CREATE ROLE ucp_scan NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
    END IF;
EXCEPTION WHEN duplicate_object THEN NULL;  -- another database on this cluster created it first
END $$;
GRANT SELECT (company_id, expires_at) ON staff_sessions, verb_approvals TO ucp_scan;
CREATE POLICY retention_scan ON staff_sessions FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');
CREATE POLICY retention_scan ON verb_approvals FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');

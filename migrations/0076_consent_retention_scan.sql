-- 0076: the retention sweeper's scan (migration 0090's role ucp_scan) sees when the consent
-- pages' rows stop counting: a confirmation form's token at expires_at, a buyer's confirmation
-- COMMERCE_KEEP after confirmed_at. Only company_id and the time, under the 'retention' scope.
-- The role is created here when this migration runs first (0090 creates it only if missing).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ucp_scan') THEN
        CREATE ROLE ucp_scan NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
    END IF;
EXCEPTION WHEN duplicate_object THEN NULL;  -- another database on this cluster created it first
END $$;
GRANT SELECT (company_id, expires_at) ON checkout_page_tokens TO ucp_scan;
GRANT SELECT (company_id, confirmed_at) ON checkout_confirmations TO ucp_scan;
CREATE POLICY retention_scan ON checkout_page_tokens FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');
CREATE POLICY retention_scan ON checkout_confirmations FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');
-- the sweeper's batch takes its rows FOR UPDATE SKIP LOCKED, which needs UPDATE on a column
GRANT UPDATE (confirmed_at) ON checkout_confirmations TO ucp_app;

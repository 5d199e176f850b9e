-- 0087: what the metrics and the SLO view read (ucp_gateway.monitor, ucp_gateway.slo).
--
-- The database gauges (webhook queue depth, oldest undelivered event and dead letters, signing
-- keys by state) are counted across companies in platform_scan_tx(pool, 'metrics', role='ucp_scan'):
-- the scan role (0090) reads only the columns granted to it, through policies naming this scope.
-- The role is made here when this migration runs first (the same statement as 0090's).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ucp_scan') THEN
        CREATE ROLE ucp_scan NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
    END IF;
EXCEPTION WHEN duplicate_object THEN NULL;  -- another database on this cluster created it first
END $$;
GRANT SELECT (company_id, enqueued_at) ON webhook_queue TO ucp_scan;
GRANT SELECT (company_id, dead_at) ON webhook_outbox TO ucp_scan;
GRANT SELECT (company_id, state) ON company_keys TO ucp_scan;
GRANT SELECT (id, slug) ON companies TO ucp_scan;
CREATE POLICY metrics_scan ON company_keys FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'metrics');
CREATE POLICY metrics_scan ON webhook_queue FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'metrics');
CREATE POLICY metrics_scan ON webhook_outbox FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'metrics');

-- request_slo_minutes: each gateway process's count of a company's UCP operations per UTC minute,
-- added up here every metrics_interval (one upsert per company and minute): requests, 5xx answers
-- and the duration histogram over ucp_gateway.metrics.SLO_BUCKETS (one more count: above the last).
CREATE TABLE request_slo_minutes (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    minute      timestamptz NOT NULL CHECK (date_trunc('minute', minute) = minute),
    operation   text NOT NULL CHECK (operation ~ '^[a-z][a-z_]{0,47}$'),
    requests    bigint NOT NULL CHECK (requests >= 0),
    errors      bigint NOT NULL CHECK (errors >= 0 AND errors <= requests),
    buckets     bigint[] NOT NULL CHECK (cardinality(buckets) = 15),
    PRIMARY KEY (company_id, operation, minute)
);
CREATE INDEX request_slo_minutes_age ON request_slo_minutes USING brin (minute);
SELECT tenant_table('request_slo_minutes');
GRANT SELECT, INSERT, UPDATE, DELETE ON request_slo_minutes TO ucp_app;

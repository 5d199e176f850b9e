-- 0106: the rate limits shared by every process and replica (ucp_gateway.access.ratelimit): one
-- token bucket per (company, bucket) as its GCRA theoretical arrival time. UNLOGGED: counters are
-- not worth a WAL write, a crash (or a failover to a standby) only forgets them. No index but the
-- key, so each upsert is a HOT update. A row whose tat has passed is a full bucket, the same as no
-- row: the retention sweeper deletes those (found as ucp_scan, by a scan of this small table).
CREATE UNLOGGED TABLE rate_limit_buckets (
    company_id uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    bucket     text NOT NULL CHECK (length(bucket) BETWEEN 1 AND 2100),
    tat        timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    granted    integer NOT NULL,
    PRIMARY KEY (company_id, bucket)
) WITH (fillfactor = 70);
SELECT tenant_table('rate_limit_buckets'::regclass);
GRANT SELECT, INSERT, UPDATE, DELETE ON rate_limit_buckets TO ucp_app;
GRANT SELECT (company_id, tat) ON rate_limit_buckets TO ucp_scan;
CREATE POLICY retention_scan ON rate_limit_buckets FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');

-- 0088: the retention sweeper removes request_slo_minutes rows older than the SLO view's longest
-- window (retention.SLO_KEEP); it finds them as ucp_scan (0090), by the BRIN index on minute (0087).
GRANT SELECT (company_id, minute) ON request_slo_minutes TO ucp_scan;
CREATE POLICY retention_scan ON request_slo_minutes FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');

-- 0090: the periodic jobs (key scheduler, retention sweeper) find what is due across all companies
-- in one set-based read, then act per company in its tenant transaction (ucp_gateway.periodic).
--
-- The read runs as the role ucp_scan (SET LOCAL ROLE inside platform_scan_tx(pool, scope,
-- role='ucp_scan')): a NOLOGIN role with no table privileges but SELECT on the few columns that say
-- which company has what due (company_id and a time, never a payload, a key or buyer data), and a
-- SELECT-only policy per table that opens every company's rows to it only under the job's scope
-- (app.platform_scan = 'key_schedule' or 'retention'). RLS stays forced; the app role itself does
-- not inherit ucp_scan (NOINHERIT), so these policies never widen what a request sees.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ucp_scan') THEN
        CREATE ROLE ucp_scan NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
    END IF;
EXCEPTION WHEN duplicate_object THEN NULL;  -- another database on this cluster created it first
END $$;
ALTER ROLE ucp_app NOINHERIT;  -- a member may SET ROLE ucp_scan; none holds its reach otherwise
GRANT ucp_scan TO ucp_app;
GRANT USAGE ON SCHEMA public TO ucp_scan;
GRANT EXECUTE ON FUNCTION app_company_id() TO ucp_scan;

-- The directory (public to every role already): the slug names a company in a round's report.
GRANT SELECT (id, slug) ON companies TO ucp_scan;

-- Key scheduler: pending keys become due publish_min after they were published, rotating keys
-- rotating_grace after they stopped signing. Few keys are in either state, so a partial index.
GRANT SELECT (company_id, state, state_changed_at) ON company_keys TO ucp_scan;
CREATE POLICY key_schedule_scan ON company_keys FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'key_schedule');
CREATE INDEX company_keys_timers ON company_keys (state_changed_at) WHERE state IN ('pending', 'rotating');

-- Retention sweeper: each rule's table, by the time its rows stop counting (migrations 0059, 0060
-- index most of them by BRIN; the two daily counters and the WebMCP sessions get theirs here:
-- rows come in time order, and a BRIN index costs next to nothing per write and keeps updates HOT).
GRANT SELECT (company_id, expires_at) ON verb_idempotency, commerce_idempotency, verb_nonce_mismatches,
    webmcp_sessions TO ucp_scan;
GRANT SELECT (company_id, used_at) ON verb_nonces TO ucp_scan;
GRANT SELECT (company_id, day) ON verb_daily_usage, verb_principal_usage TO ucp_scan;
GRANT SELECT (company_id, expires_at, order_id) ON checkout_sessions TO ucp_scan;
GRANT SELECT (company_id, id, created_at, delivered_at) ON webhook_outbox TO ucp_scan;
GRANT SELECT (company_id, event_id) ON webhook_queue TO ucp_scan;  -- is an old event still queued?
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['verb_idempotency', 'commerce_idempotency', 'verb_nonce_mismatches', 'webmcp_sessions',
                             'verb_nonces', 'verb_daily_usage', 'verb_principal_usage', 'checkout_sessions',
                             'webhook_outbox', 'webhook_queue'] LOOP
        EXECUTE format('CREATE POLICY retention_scan ON %I FOR SELECT TO ucp_scan '
                       'USING (current_setting(''app.platform_scan'', true) = ''retention'')', t);
    END LOOP;
END $$;
CREATE INDEX verb_daily_usage_day_brin ON verb_daily_usage USING brin (day) WITH (autosummarize = on);
CREATE INDEX verb_principal_usage_day_brin ON verb_principal_usage USING brin (day) WITH (autosummarize = on);
CREATE INDEX webmcp_sessions_expires_brin ON webmcp_sessions USING brin (expires_at) WITH (autosummarize = on);

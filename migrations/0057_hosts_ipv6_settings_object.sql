-- 0057: company_hosts.hostname takes IPv6 literals; companies.settings must be a JSON object.
-- 0001's hostname CHECK refused any value ending in ':<digits>' (meant: a port), which refused '::1'
-- and most IPv6 literals that tenancy._validate accepts (a raw check_violation at `companies create`).
-- Now: lower-case and non-empty as before; a value with a colon must be IPv6-shaped (hex digits,
-- dots, at least two colons), so a single-colon 'host:port' (or any port, or brackets) is refused.
-- The gateway stores IPv6 unbracketed in ipaddress's compressed form (tenancy.normalize_host).
-- A settings value that is not an object (an operator's SQL) failed every request of that company
-- with a 500; tenancy now refuses such a row with a clean error, and the database refuses new ones.
-- Existing rows: both constraints are added NOT VALID (no row is rewritten or deleted, and the
-- migration cannot fail on old data), then validated where every existing row passes, which is every
-- database the gateway alone wrote. Where a row fails, the constraint stays NOT VALID (new and updated
-- rows are still checked; pg_constraint.convalidated is false) until the operator corrects the row
-- and runs ALTER TABLE ... VALIDATE CONSTRAINT; a company with such settings answers with
-- company_misconfigured meanwhile.
ALTER TABLE company_hosts DROP CONSTRAINT company_hosts_hostname_check,
    ADD CONSTRAINT company_hosts_hostname_check CHECK (
        hostname = lower(hostname) AND length(hostname) > 0
        AND (strpos(hostname, ':') = 0 OR hostname ~ '^[0-9a-f.]*:[0-9a-f.]*:[0-9a-f.:]*$')) NOT VALID;
ALTER TABLE companies ADD CONSTRAINT companies_settings_object CHECK (jsonb_typeof(settings) = 'object') NOT VALID;

DO $$
BEGIN
    BEGIN
        ALTER TABLE company_hosts VALIDATE CONSTRAINT company_hosts_hostname_check;
    EXCEPTION WHEN check_violation THEN
        RAISE WARNING 'company_hosts has hostnames that are neither a host name nor an IPv6 literal; '
                      'company_hosts_hostname_check stays NOT VALID until they are corrected';
    END;
    BEGIN
        ALTER TABLE companies VALIDATE CONSTRAINT companies_settings_object;
    EXCEPTION WHEN check_violation THEN
        RAISE WARNING 'companies has settings that are not a JSON object; companies_settings_object '
                      'stays NOT VALID until they are corrected (those companies answer company_misconfigured)';
    END;
END $$;

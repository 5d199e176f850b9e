-- 0092: a version stamp per company for what its rendered /.well-known/ucp depends on: its row
-- (settings, policy), hostnames, sub-agents and published keys. Every row written to one of them
-- gives the company a fresh random version in the same transaction (row triggers, as 0052 does for
-- the catalogue). A gateway keeps a rendered profile with the version it was rendered at; when the
-- entry's time is up it reads only the version (one small statement in the company's context) and
-- renders again only when it changed (discovery/profile_cache.py).
CREATE TABLE profile_versions (
    company_id uuid PRIMARY KEY REFERENCES companies (id) ON DELETE CASCADE,
    version    uuid NOT NULL
);
INSERT INTO profile_versions (company_id, version) SELECT id, gen_random_uuid() FROM companies;
SELECT tenant_table('profile_versions');
GRANT SELECT, INSERT, UPDATE ON profile_versions TO ucp_app;

-- Statement triggers over the transition table: one upsert per statement and company, whatever the
-- rows (a company's eight sub-agents are one statement). A row of a company deleted in the same
-- statement (ON DELETE CASCADE) has no company left to version: the join leaves it out.
CREATE FUNCTION profile_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO profile_versions AS v (company_id, version)
        SELECT c.id, gen_random_uuid() FROM (SELECT DISTINCT company_id FROM changed) AS x
        JOIN companies c ON c.id = x.company_id
        ON CONFLICT (company_id) DO UPDATE SET version = EXCLUDED.version;
    RETURN NULL;
END $$;
CREATE FUNCTION profile_version_bump_company() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO profile_versions AS v (company_id, version) SELECT id, gen_random_uuid() FROM changed
        ON CONFLICT (company_id) DO UPDATE SET version = EXCLUDED.version;
    RETURN NULL;
END $$;

CREATE TRIGGER profile_version_insert AFTER INSERT ON companies REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION profile_version_bump_company();
CREATE TRIGGER profile_version_update AFTER UPDATE ON companies REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION profile_version_bump_company();
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['company_hosts', 'subagents', 'company_keys'] LOOP
        EXECUTE format('CREATE TRIGGER profile_version_insert AFTER INSERT ON %I REFERENCING NEW TABLE AS changed'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION profile_version_bump()', t);
        EXECUTE format('CREATE TRIGGER profile_version_update AFTER UPDATE ON %I REFERENCING NEW TABLE AS changed'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION profile_version_bump()', t);
        EXECUTE format('CREATE TRIGGER profile_version_delete AFTER DELETE ON %I REFERENCING OLD TABLE AS changed'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION profile_version_bump()', t);
    END LOOP;
END $$;

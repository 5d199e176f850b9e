-- 0052: a version stamp per company for the catalogue parts that every pricing reads whole and
-- that change rarely: shipping rates, promotions and discount codes. Every row written to one of
-- them gives its company a fresh random version in the same transaction (row triggers), so a
-- version names exactly one state of those three tables. The gateway keeps parsed copies keyed by
-- version and reads only the version with each pricing (commerce/repo.py): what it uses is what
-- the same statement's snapshot holds, as before. A company without a version row is read in full
-- every time. TRUNCATE is refused on the three tables (it fires no row trigger); delete rows instead.
CREATE TABLE catalog_versions (
    company_id uuid PRIMARY KEY,
    version    uuid NOT NULL
);
INSERT INTO catalog_versions (company_id, version) SELECT id, gen_random_uuid() FROM companies;
SELECT tenant_table('catalog_versions');
GRANT SELECT, INSERT, UPDATE ON catalog_versions TO ucp_app;

CREATE FUNCTION catalog_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO catalog_versions AS v (company_id, version) VALUES (OLD.company_id, gen_random_uuid())
            ON CONFLICT (company_id) DO UPDATE SET version = EXCLUDED.version;
    END IF;
    IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR NEW.company_id IS DISTINCT FROM OLD.company_id) THEN
        INSERT INTO catalog_versions AS v (company_id, version) VALUES (NEW.company_id, gen_random_uuid())
            ON CONFLICT (company_id) DO UPDATE SET version = EXCLUDED.version;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION catalog_no_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% cannot be truncated (catalogue versions, migration 0052): delete its rows', TG_TABLE_NAME
        USING ERRCODE = '42501';
END $$;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['shipping_rates', 'promotions', 'discounts'] LOOP
        EXECUTE format('CREATE TRIGGER catalog_version AFTER INSERT OR UPDATE OR DELETE ON %I'
                       ' FOR EACH ROW EXECUTE FUNCTION catalog_version_bump()', t);
        EXECUTE format('CREATE TRIGGER catalog_no_truncate BEFORE TRUNCATE ON %I'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION catalog_no_truncate()', t);
    END LOOP;
END $$;

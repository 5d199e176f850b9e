-- 0140: the agent graph's directory: one row per company with what a graph page lists (slug, name,
-- settings.platform_listing, first hostname in code-point order), kept by statement triggers on
-- companies and company_hosts, so that a page is one index range read (company_directory_page:
-- slug order, every listed column in the index) instead of a per-company lookup of its first host
-- (discovery/graph.py). Public like companies and company_hosts (what it holds is a part of their
-- directory columns); written only inside the company's own tenant context, by the triggers, which
-- run as the invoker under RLS (TRUNCATE fires no row trigger: refused below as for the catalogue).
CREATE TABLE company_directory (
    company_id uuid PRIMARY KEY REFERENCES companies (id) ON DELETE CASCADE,
    slug       text NOT NULL,
    name       text NOT NULL,
    listing    jsonb,  -- companies.settings -> 'platform_listing'
    host       text    -- min(hostname COLLATE "C"); NULL: the company has none
);
-- not UNIQUE: a statement that swaps two slugs writes the rows one at a time (companies.slug is)
CREATE INDEX company_directory_page ON company_directory (slug) INCLUDE (name, listing, host);
INSERT INTO company_directory (company_id, slug, name, listing, host)
    SELECT c.id, c.slug, c.display_name, c.settings -> 'platform_listing',
        (SELECT min(h.hostname COLLATE "C") FROM company_hosts h WHERE h.company_id = c.id)
    FROM companies c;
SELECT tenant_table('company_directory');
CREATE POLICY directory_read ON company_directory FOR SELECT USING (true);
GRANT SELECT, INSERT, UPDATE ON company_directory TO ucp_app;

-- A company written (insert, update): its row as it now is, read from the tables (not the
-- transition rows), so triggers of one transaction in any order leave the same row; unchanged
-- rows are not rewritten (no dead tuple per settings change, the index-only scan stays one).
CREATE FUNCTION company_directory_company() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO company_directory AS d (company_id, slug, name, listing, host)
        SELECT c.id, c.slug, c.display_name, c.settings -> 'platform_listing',
            (SELECT min(h.hostname COLLATE "C") FROM company_hosts h WHERE h.company_id = c.id)
        FROM changed c
        ON CONFLICT (company_id) DO UPDATE SET
            slug = EXCLUDED.slug, name = EXCLUDED.name, listing = EXCLUDED.listing, host = EXCLUDED.host
            WHERE (d.slug, d.name, d.listing, d.host) IS DISTINCT FROM
                (EXCLUDED.slug, EXCLUDED.name, EXCLUDED.listing, EXCLUDED.host);
    RETURN NULL;
END $$;
-- Hostnames written (insert, update: old and new rows, delete): each company's first host again.
-- A company deleted in the same statement has no directory row left: the UPDATE finds none.
CREATE FUNCTION company_directory_hosts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE company_directory AS d SET host = x.host
        FROM (SELECT k.company_id,
                (SELECT min(h.hostname COLLATE "C") FROM company_hosts h WHERE h.company_id = k.company_id) AS host
            FROM (SELECT DISTINCT company_id FROM changed) AS k) AS x
        WHERE d.company_id = x.company_id AND d.host IS DISTINCT FROM x.host;
    RETURN NULL;
END $$;
CREATE FUNCTION company_directory_no_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'TRUNCATE % fires no row trigger: the agent-graph directory would go stale', TG_TABLE_NAME;
END $$;

CREATE TRIGGER company_directory_insert AFTER INSERT ON companies REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION company_directory_company();
CREATE TRIGGER company_directory_update AFTER UPDATE ON companies REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION company_directory_company();
CREATE TRIGGER company_directory_insert AFTER INSERT ON company_hosts REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION company_directory_hosts();
CREATE TRIGGER company_directory_update_old AFTER UPDATE ON company_hosts REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION company_directory_hosts();
CREATE TRIGGER company_directory_update_new AFTER UPDATE ON company_hosts REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION company_directory_hosts();
CREATE TRIGGER company_directory_delete AFTER DELETE ON company_hosts REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION company_directory_hosts();
CREATE TRIGGER company_directory_no_truncate BEFORE TRUNCATE ON company_hosts
    FOR EACH STATEMENT EXECUTE FUNCTION company_directory_no_truncate();

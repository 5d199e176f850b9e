-- 0068: per-company search terms, so a text search's candidates cost what its page costs.
--
-- The GIN index on catalog_products.search spans every company (migration 0065) and a bitmap scan
-- reads every match before its LIMIT: a search of a 1,000-product shop read the posting lists of
-- the platform's 100,000-product one, and a common word read all its matches to keep 100.
-- catalog_terms holds one row per (company, lexeme, product), the lexemes of the product's search
-- document. Its primary key walks one company's products of one lexeme in product order, so a
-- conjunction of words is a merge join of ordered index-only scans that stops at its LIMIT
-- (commerce/catalog_search.py, the term path). The product's filter columns ride along (INCLUDE):
-- a price or availability filter is checked in the index-only scan, and only the products that
-- pass are read. Kept true by statement triggers on catalog_products (transition tables: an import
-- batch writes its terms in one statement; a refresh that changes neither the search document nor
-- a filter column, such as a stock change that keeps the product in stock, writes none).

CREATE TABLE catalog_terms (
    company_id uuid NOT NULL,
    lexeme     text NOT NULL,
    product_id text NOT NULL,
    min_price  bigint,
    max_price  bigint,
    currency   char(3),
    available  boolean NOT NULL,
    PRIMARY KEY (company_id, lexeme, product_id) INCLUDE (min_price, max_price, currency, available)
);
SELECT tenant_table('catalog_terms');
GRANT SELECT, INSERT, DELETE ON catalog_terms TO ucp_app;

CREATE FUNCTION catalog_terms_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO catalog_terms (company_id, lexeme, product_id, min_price, max_price, currency, available)
        SELECT n.company_id, l, n.id, n.min_price, n.max_price, n.currency, n.available FROM new_rows n, unnest(tsvector_to_array(n.search)) l
        ON CONFLICT DO NOTHING;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM catalog_terms t USING old_rows o WHERE t.company_id = o.company_id AND t.product_id = o.id;
    ELSE  -- only the rows whose search document, filter columns (or id) changed
        DELETE FROM catalog_terms t USING old_rows o
        WHERE t.company_id = o.company_id AND t.product_id = o.id
          AND NOT EXISTS (SELECT 1 FROM new_rows n
                          WHERE n.company_id = o.company_id AND n.id = o.id AND (n.search, n.min_price, n.max_price, n.currency, n.available)
                              IS NOT DISTINCT FROM (o.search, o.min_price, o.max_price, o.currency, o.available));
        INSERT INTO catalog_terms (company_id, lexeme, product_id, min_price, max_price, currency, available)
        SELECT n.company_id, l, n.id, n.min_price, n.max_price, n.currency, n.available FROM new_rows n, unnest(tsvector_to_array(n.search)) l
        WHERE NOT EXISTS (SELECT 1 FROM old_rows o
                          WHERE o.company_id = n.company_id AND o.id = n.id AND (n.search, n.min_price, n.max_price, n.currency, n.available)
                              IS NOT DISTINCT FROM (o.search, o.min_price, o.max_price, o.currency, o.available))
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER catalog_terms_ins AFTER INSERT ON catalog_products REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_terms_sync();
CREATE TRIGGER catalog_terms_upd AFTER UPDATE ON catalog_products
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_terms_sync();
CREATE TRIGGER catalog_terms_del AFTER DELETE ON catalog_products REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_terms_sync();

-- the terms of the products that exist, company by company in its own tenant context (RLS is
-- forced: a migrating owner that is not a superuser sees one company's rows at a time)
DO $$
DECLARE c uuid;
BEGIN
    FOR c IN SELECT id FROM companies LOOP
        PERFORM set_config('app.company_id', c::text, true);
        INSERT INTO catalog_terms (company_id, lexeme, product_id, min_price, max_price, currency, available)
        SELECT p.company_id, l, p.id, p.min_price, p.max_price, p.currency, p.available FROM catalog_products p, unnest(tsvector_to_array(p.search)) l
        WHERE p.company_id = c
        ON CONFLICT DO NOTHING;
    END LOOP;
    PERFORM set_config('app.company_id', '', true);
END $$;

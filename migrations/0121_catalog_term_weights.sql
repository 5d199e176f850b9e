-- 0121: relevance from the term index alone.
--
-- A term-path search ranked its candidates with ts_rank_cd over each product's tsvector: one
-- product read per candidate, half of a two-word search's database time at 100,000 products.
-- Each term now carries its weight in the product (the best field it appears in: title A 10,
-- tags, categories, brand and variants B 4, description C 2, D 1; ts_rank's default 1 : 2 : 4 : 10
-- in integers, so sums are exact), and a product's relevance to a query is the sum of the
-- weights of the query's lexemes it has (catalog_rank): computed in the index-only scans, the
-- same on the GIN path from the tsvector. Field weighting, no proximity: a title that names both
-- words outranks a description that does.

-- the weight of one lexeme given its positions' weight labels (unnest(tsvector).weights)
CREATE FUNCTION catalog_term_weight(weights text[]) RETURNS smallint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (CASE WHEN 'A' = ANY (weights) THEN 10 WHEN 'B' = ANY (weights) THEN 4
                 WHEN 'C' = ANY (weights) THEN 2 ELSE 1 END)::smallint
$$;

-- a product's relevance to a query's lexemes: the sum of the weights of those it has
CREATE FUNCTION catalog_rank(doc tsvector, lexemes text[]) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(catalog_term_weight(u.weights)), 0)::integer FROM unnest(doc) u WHERE u.lexeme = ANY (lexemes)
$$;

ALTER TABLE catalog_terms ADD COLUMN weight smallint NOT NULL DEFAULT 1;

CREATE OR REPLACE FUNCTION catalog_terms_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO catalog_terms (company_id, lexeme, product_id, min_price, max_price, currency, available, weight)
        SELECT n.company_id, u.lexeme, n.id, n.min_price, n.max_price, n.currency, n.available, catalog_term_weight(u.weights)
        FROM new_rows n, unnest(n.search) u
        ON CONFLICT DO NOTHING;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM catalog_terms t USING old_rows o WHERE t.company_id = o.company_id AND t.product_id = o.id;
    ELSE  -- only the rows whose search document, filter columns (or id) changed
        DELETE FROM catalog_terms t USING old_rows o
        WHERE t.company_id = o.company_id AND t.product_id = o.id
          AND NOT EXISTS (SELECT 1 FROM new_rows n
                          WHERE n.company_id = o.company_id AND n.id = o.id AND (n.search, n.min_price, n.max_price, n.currency, n.available)
                              IS NOT DISTINCT FROM (o.search, o.min_price, o.max_price, o.currency, o.available));
        INSERT INTO catalog_terms (company_id, lexeme, product_id, min_price, max_price, currency, available, weight)
        SELECT n.company_id, u.lexeme, n.id, n.min_price, n.max_price, n.currency, n.available, catalog_term_weight(u.weights)
        FROM new_rows n, unnest(n.search) u
        WHERE NOT EXISTS (SELECT 1 FROM old_rows o
                          WHERE o.company_id = n.company_id AND o.id = n.id AND (n.search, n.min_price, n.max_price, n.currency, n.available)
                              IS NOT DISTINCT FROM (o.search, o.min_price, o.max_price, o.currency, o.available))
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;

-- the weights of the terms that exist, company by company in its own tenant context (RLS is forced)
DO $$
DECLARE c uuid;
BEGIN
    FOR c IN SELECT id FROM companies LOOP
        PERFORM set_config('app.company_id', c::text, true);
        UPDATE catalog_terms t SET weight = x.w
        FROM (SELECT p.id, u.lexeme, catalog_term_weight(u.weights) AS w
              FROM catalog_products p, unnest(p.search) u WHERE p.company_id = c) x
        WHERE t.company_id = c AND t.product_id = x.id AND t.lexeme = x.lexeme AND t.weight <> x.w;
    END LOOP;
    PERFORM set_config('app.company_id', '', true);
END $$;

-- the weight rides in the index, as the filter columns do (index-only scans stay index-only)
ALTER TABLE catalog_terms DROP CONSTRAINT catalog_terms_pkey,
    ADD PRIMARY KEY (company_id, lexeme, product_id) INCLUDE (min_price, max_price, currency, available, weight);

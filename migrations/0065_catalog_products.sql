-- 0065: the searchable catalogue (UCP catalog search / lookup, types/product.json and variant.json).
--
-- catalog_products is the product level: handle, title, description, categories, tags, brand,
-- media (its options are read from its variants' option values). The sellable unit stays the `products` row of migration 0002 (what checkout
-- prices and `line_items[].item.id` names): it is the UCP *variant*, and gains its parent product,
-- SKU, GTIN, option values, list price and position here. A `products` row without a parent is
-- sellable but not listed by search.
--
-- Per product, what search filters and sorts on is kept in the row itself, so one index answers a
-- page: min/max variant price and currency, whether any variant is in stock, and the tsvector
-- (english stemming; title A, categories/tags/brand/option values B, description C). Triggers keep
-- them true: statement triggers on `products` (transition tables: an import of 100,000 rows
-- recomputes each parent once per statement) and a row trigger on `inventory` that fires only when a
-- variant's stock crosses zero (WHEN clause: a checkout's decrement that keeps stock above zero calls
-- no function).

CREATE TABLE catalog_products (
    company_id   uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id           text NOT NULL CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$'),
    handle       text NOT NULL CHECK (handle ~ '^[a-z0-9][a-z0-9-]{0,199}$'),
    title        text NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
    description  text NOT NULL DEFAULT '' CHECK (length(description) <= 20000),
    brand        text,
    categories   text[] NOT NULL DEFAULT '{}',
    tags         text[] NOT NULL DEFAULT '{}',
    media        jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(media) = 'array'),    -- [{type, url, alt_text?}]
    -- kept by the triggers below from the variants (products rows with product_id = id)
    min_price    bigint,                    -- minor units; NULL while the product has no variant
    max_price    bigint,
    currency     char(3),
    available    boolean NOT NULL DEFAULT false,  -- some variant has stock > 0
    variant_text text NOT NULL DEFAULT '',        -- the variants' titles and option labels (for search)
    search       tsvector NOT NULL DEFAULT ''::tsvector,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (company_id, id),
    UNIQUE (company_id, handle)
);

ALTER TABLE products
    ADD COLUMN product_id  text,
    ADD COLUMN sku         text CHECK (length(sku) BETWEEN 1 AND 200),
    ADD COLUMN gtin        text CHECK (gtin ~ '^[0-9]{8,14}$'),
    ADD COLUMN options     jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(options) = 'array'),  -- [{name, label}]
    ADD COLUMN list_price  bigint CHECK (list_price >= 0),
    ADD COLUMN description text,
    ADD COLUMN position    integer NOT NULL DEFAULT 0,
    ADD FOREIGN KEY (company_id, product_id) REFERENCES catalog_products (company_id, id) ON DELETE CASCADE;
CREATE INDEX products_parent ON products (company_id, product_id, position, id) WHERE product_id IS NOT NULL;
CREATE UNIQUE INDEX products_sku ON products (company_id, sku) WHERE sku IS NOT NULL;
CREATE INDEX products_gtin ON products (company_id, gtin) WHERE gtin IS NOT NULL;

-- search: one GIN over every company's rows (RLS adds company_id = app_company_id(); without
-- btree_gin the company cannot be a GIN key); browse orders and keyset pages per company
CREATE INDEX catalog_products_search ON catalog_products USING gin (search);
CREATE INDEX catalog_products_categories ON catalog_products USING gin (categories);
CREATE INDEX catalog_products_price ON catalog_products (company_id, min_price, id);
CREATE INDEX catalog_products_title ON catalog_products (company_id, lower(title), id);
CREATE INDEX catalog_products_newest ON catalog_products (company_id, created_at DESC, id);

-- the search document of one product (immutable: english is a built-in configuration)
CREATE FUNCTION catalog_search_doc(title text, tags text, description text, variant_text text)
    RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT setweight(to_tsvector('english'::regconfig, coalesce(title, '')), 'A')
        || setweight(to_tsvector('english'::regconfig, coalesce(tags, '') || ' ' || coalesce(variant_text, '')), 'B')
        || setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'C')
$$;

CREATE FUNCTION catalog_product_doc() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.search := catalog_search_doc(NEW.title,
        array_to_string(NEW.categories, ' ') || ' ' || array_to_string(NEW.tags, ' ') || ' ' || coalesce(NEW.brand, ''),
        NEW.description, NEW.variant_text);
    RETURN NEW;
END $$;
CREATE TRIGGER catalog_product_doc BEFORE INSERT OR UPDATE ON catalog_products
    FOR EACH ROW EXECUTE FUNCTION catalog_product_doc();

-- recompute the variant-derived columns of the given parents (of the current tenant: RLS)
CREATE FUNCTION catalog_refresh(ids text[]) RETURNS void LANGUAGE sql AS $$
    UPDATE catalog_products p SET
        min_price = v.min_price, max_price = v.max_price, currency = v.currency,
        available = coalesce(v.available, false), variant_text = coalesce(v.variant_text, ''), updated_at = now()
    FROM (SELECT c.company_id, c.id, agg.* FROM catalog_products c LEFT JOIN LATERAL (
              SELECT min(x.price) AS min_price, max(x.price) AS max_price, min(x.currency) AS currency,
                     bool_or(coalesce(i.quantity, 0) > 0) AS available,
                     (SELECT string_agg(DISTINCT o->>'label', ' ') FROM products y,
                          jsonb_array_elements(y.options) o
                      WHERE y.company_id = c.company_id AND y.product_id = c.id) AS variant_text
              FROM products x LEFT JOIN inventory i ON i.company_id = x.company_id AND i.product_id = x.id
              WHERE x.company_id = c.company_id AND x.product_id = c.id) agg ON true
          WHERE c.id = ANY(ids)) v
    WHERE p.company_id = v.company_id AND p.id = v.id
      AND (p.min_price, p.max_price, p.currency, p.available, p.variant_text)
          IS DISTINCT FROM (v.min_price, v.max_price, v.currency, coalesce(v.available, false), coalesce(v.variant_text, ''))
$$;

CREATE FUNCTION catalog_variants_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM catalog_refresh(ARRAY(SELECT DISTINCT product_id FROM new_rows WHERE product_id IS NOT NULL));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM catalog_refresh(ARRAY(SELECT DISTINCT product_id FROM old_rows WHERE product_id IS NOT NULL));
    ELSE
        PERFORM catalog_refresh(ARRAY(SELECT product_id FROM new_rows WHERE product_id IS NOT NULL
                                      UNION SELECT product_id FROM old_rows WHERE product_id IS NOT NULL));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER catalog_variants_ins AFTER INSERT ON products REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_variants_changed();
CREATE TRIGGER catalog_variants_upd AFTER UPDATE ON products REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_variants_changed();
CREATE TRIGGER catalog_variants_del AFTER DELETE ON products REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_variants_changed();

CREATE FUNCTION catalog_stock_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM catalog_refresh(ARRAY(SELECT product_id FROM products
        WHERE id = CASE WHEN TG_OP = 'DELETE' THEN OLD.product_id ELSE NEW.product_id END AND product_id IS NOT NULL));
    RETURN NULL;
END $$;
-- only when the in-stock answer can change: a decrement that stays above zero queues nothing
CREATE TRIGGER catalog_stock_upd AFTER UPDATE OF quantity ON inventory
    FOR EACH ROW WHEN ((OLD.quantity > 0) IS DISTINCT FROM (NEW.quantity > 0))
    EXECUTE FUNCTION catalog_stock_changed();
CREATE TRIGGER catalog_stock_ins AFTER INSERT ON inventory
    FOR EACH ROW WHEN (NEW.quantity > 0) EXECUTE FUNCTION catalog_stock_changed();
CREATE TRIGGER catalog_stock_del AFTER DELETE ON inventory
    FOR EACH ROW WHEN (OLD.quantity > 0) EXECUTE FUNCTION catalog_stock_changed();

-- typo tolerance: pg_trgm when the server has it (the embedded pgserver build ships none; an
-- external PostgreSQL with contrib does). commerce/catalog_repo.py asks pg_extension once.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
        EXECUTE 'CREATE INDEX catalog_products_trgm ON catalog_products USING gin (lower(title) gin_trgm_ops)';
    END IF;
END $$;

SELECT tenant_table('catalog_products');

-- every item sold so far stays listed: one product per existing products row (its own id), seen
-- here only by an owner that bypasses RLS (the embedded server's superuser; elsewhere a no-op, and
-- `catalog import` lists the items). The demo seed regroups its items into products with variants.
INSERT INTO catalog_products (company_id, id, handle, title)
SELECT company_id, id,
       left(trim(both '-' from lower(regexp_replace(id, '[^A-Za-z0-9]+', '-', 'g'))), 180)
           || CASE WHEN count(*) OVER w > 1 THEN '-' || row_number() OVER w ELSE '' END,
       left(title, 500)
FROM products
WHERE id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$' AND length(title) BETWEEN 1 AND 500
  AND lower(regexp_replace(id, '[^A-Za-z0-9]+', '', 'g')) <> ''
WINDOW w AS (PARTITION BY company_id, left(trim(both '-' from lower(regexp_replace(id, '[^A-Za-z0-9]+', '-', 'g'))), 180));
UPDATE products p SET product_id = p.id FROM catalog_products c WHERE c.company_id = p.company_id AND c.id = p.id;
GRANT SELECT, INSERT, UPDATE, DELETE ON catalog_products TO ucp_app;

-- 0032: append several audit rows in one call (group transactions of READ dispatches).
-- Each element is the canonical JSON text of one entry; rows are chained in array order.
CREATE FUNCTION verb_audit_append_batch(p_company uuid, p_canonical text[])
    RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    i int;
    e jsonb;
    r record;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_canonical, 1), 0) LOOP
        e := p_canonical[i]::jsonb;
        SELECT * INTO r FROM verb_audit_append(p_company, (e->>'at')::timestamptz, e->>'verb', e->>'decision',
                                               e->>'status', e->'principal'->>'subject', e, p_canonical[i]);
        RETURN NEXT r.audit_id;
    END LOOP;
END $$;
GRANT EXECUTE ON FUNCTION verb_audit_append_batch(uuid, text[]) TO ucp_app;

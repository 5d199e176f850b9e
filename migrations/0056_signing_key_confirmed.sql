-- 0056: the signing-key confirmation that rides in a signed response's COMMIT (httpsig/signkey.py) as
-- a function. It was a statement of two subqueries sent as text, so PostgreSQL parsed, analysed and
-- planned it anew for every signed response (about 600k instructions; 200k as a call of this
-- function, whose query plpgsql plans once per connection). Same check: the company, state 'active',
-- the kid and the SHA-256 of the stored record (private_enc as text). It sets the tenant context
-- itself, transaction-local (the probe runs after the request's COMMIT, in a transaction of its own),
-- runs as the caller so RLS binds it to that tenant, and names the company explicitly besides RLS.
CREATE FUNCTION signing_key_confirmed(p_company uuid, p_kid text, p_digest bytea)
    RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_set text := set_config('app.company_id', p_company::text, true);
BEGIN
    RETURN EXISTS (SELECT 1 FROM company_keys k WHERE k.state = 'active' AND k.company_id = p_company
                   AND k.kid = p_kid AND sha256(convert_to(k.private_enc::text, 'UTF8')) = p_digest);
END $$;
REVOKE ALL ON FUNCTION signing_key_confirmed(uuid, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signing_key_confirmed(uuid, text, bytea) TO ucp_app;

-- 0091: one statement writes a new company: its row, hostnames, sub-agents and (when given) its
-- first key, active, with the key's "create" event. `companies create` (tenancy.insert_company) and
-- `companies import` (keys/onboarding.py, many calls pipelined in one transaction) both call it.
-- SECURITY INVOKER: it runs as the application role under RLS, in the new company's own tenant
-- context, which it sets itself (transaction-local, as tenant_tx does): the policies check every row.
CREATE FUNCTION company_insert(
    p_company text, p_slug text, p_name text, p_tier text, p_policy text, p_settings jsonb,
    p_hosts text[], p_subagents text[], p_enabled boolean[],
    p_kid text, p_public_jwk jsonb, p_private_enc jsonb, p_kek_id text, p_at timestamptz
) RETURNS void
    LANGUAGE plpgsql SECURITY INVOKER
    AS $$
BEGIN
    PERFORM set_config('app.company_id', $1, true);
    INSERT INTO companies (id, slug, display_name, tier, signature_policy, settings)
        VALUES (p_company::uuid, p_slug, p_name, p_tier, p_policy, p_settings);
    INSERT INTO company_hosts (hostname, company_id) SELECT h, p_company::uuid FROM unnest(p_hosts) AS h;
    INSERT INTO subagents (company_id, name, enabled)
        SELECT p_company::uuid, s.name, s.enabled FROM unnest(p_subagents, p_enabled) AS s (name, enabled);
    IF p_kid IS NOT NULL THEN
        INSERT INTO company_keys (company_id, kid, state, public_jwk, private_enc, kek_id, created_at, state_changed_at)
            VALUES (p_company::uuid, p_kid, 'active', p_public_jwk, p_private_enc, p_kek_id, p_at, p_at);
        INSERT INTO key_events (company_id, kid, from_state, to_state, event, actor, reason, at)
            VALUES (p_company::uuid, p_kid, NULL, 'active', 'create', 'system', 'bootstrap', p_at);
    END IF;
END $$;
REVOKE ALL ON FUNCTION company_insert(text, text, text, text, text, jsonb, text[], text[], boolean[], text, jsonb, jsonb,
    text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION company_insert(text, text, text, text, text, jsonb, text[], text[], boolean[], text, jsonb,
    jsonb, text, timestamptz) TO ucp_app;

-- 0055: a verb's idempotency record is written ONCE, by the execution's last statement. Until now
-- the key was claimed by an INSERT at the start of the transaction (a concurrent duplicate waited on
-- the unique index) and the 2-4 kB envelope was added by an UPDATE at the end: two row versions and
-- their index entries per write dispatch, and one round trip of its own.
-- Now the transaction's first statement (sent with BEGIN) takes a transaction-scoped advisory lock on
-- a 64-bit hash of (company, principal, verb, key) and refuses, with SQLSTATE UV409, when a live
-- record exists; the caller then reads that record and replays it (or answers 409). The lock is held
-- to COMMIT, so a concurrent duplicate waits before its handler runs (and before any row lock the
-- handler takes), then finds the committed record; if the first one rolled back, it executes. Every
-- writer of verb_idempotency takes the lock first (the dispatcher only), and the final INSERT
-- still refuses to overwrite a live record (ON CONFLICT .. WHERE expired), so nothing is lost even
-- if a writer did not.
-- The envelope is stored as json (its text as written) instead of jsonb: nothing queries inside it,
-- the replay decodes it whole, and json input is a syntax check where jsonb builds a tree.
ALTER TABLE verb_idempotency ALTER COLUMN envelope TYPE json USING envelope::json;
-- No query reads records by expiry (a lookup is by the whole key); an index less per record.
DROP INDEX verb_idempotency_expiry;

-- Arguments as UTF-8 bytes so the caller can inline them as hex (decode('..', 'hex')) in the BEGIN
-- round trip without quoting text; p_now is the dispatcher's clock (a record is live while
-- expires_at > p_now, as the replay read decides). Runs as the caller: RLS binds it to the tenant.
-- enable_seqscan off: plpgsql caches the lookup's plan per connection, and one made while the table
-- was small (a new database) would keep scanning it all as it grows. The primary key, the table's
-- only index now, is the one way left.
CREATE FUNCTION verb_idempotency_claim(p_principal bytea, p_verb bytea, p_key bytea, p_now timestamptz)
    RETURNS void LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_company uuid := app_company_id();
    v_principal text := convert_from(p_principal, 'UTF8');
    v_verb text := convert_from(p_verb, 'UTF8');
    v_key text := convert_from(p_key, 'UTF8');
BEGIN
    IF v_company IS NULL THEN
        RAISE EXCEPTION 'verb_idempotency_claim needs a tenant context' USING ERRCODE = '42501';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(
        'verb|' || length(v_principal) || '|' || v_principal || '|' || v_verb || '|' || v_key || '|' || v_company, 0));
    -- a new statement, so a new snapshot: sees what a duplicate that held the lock committed
    IF EXISTS (SELECT 1 FROM verb_idempotency i WHERE i.company_id = v_company AND i.principal = v_principal
               AND i.verb = v_verb AND i.key = v_key AND i.expires_at > p_now) THEN
        RAISE EXCEPTION 'idempotency key already used' USING ERRCODE = 'UV409';
    END IF;
END $$;
GRANT EXECUTE ON FUNCTION verb_idempotency_claim(bytea, bytea, bytea, timestamptz) TO ucp_app;

-- 0051: verb_audit_append takes and advances its lane head in ONE statement. 0033 locked the head
-- with SELECT .. FOR UPDATE (a row-lock write of its own) and then updated it: two statements and
-- two heap writes of the hottest row per audited dispatch. Now one UPDATE .. RETURNING increments
-- seq and moves head_hash to the new row's hash; the new column prev_hash keeps the hash it
-- replaced, which is the new row's prev_hash. Under READ COMMITTED a concurrent append to the same
-- lane waits for the row lock and then recomputes from the head it finds (EvalPlanQual), as
-- before. Same signature, same hashes: rows written before and after verify alike.
-- audit_id is now drawn just before the head is taken, so within a lane audit_id follows seq only
-- approximately under concurrency (seq is the chain's order; audit_id orders across lanes).
ALTER TABLE verb_audit_heads ADD COLUMN prev_hash bytea;

CREATE OR REPLACE FUNCTION verb_audit_append(p_company uuid, p_created_at timestamptz, p_verb text, p_decision text,
                                             p_status text, p_subject text, p_entry jsonb, p_canonical text,
                                             OUT audit_id bigint, OUT seq bigint)
    LANGUAGE plpgsql AS $$
DECLARE
    v_prev bytea;
    v_hash bytea;
    v_lane smallint := nullif(current_setting('app.audit_lane', true), '')::smallint;
BEGIN
    IF v_lane IS NULL THEN
        v_lane := (hashtextextended(p_subject, 0) & 15)::smallint;
        PERFORM set_config('app.audit_lane', v_lane::text, true);
    END IF;
    audit_id := nextval('verb_audit_id_seq');
    UPDATE verb_audit_heads h SET seq = h.seq + 1, prev_hash = h.head_hash,
            head_hash = sha256(h.head_hash || int8send(h.seq + 1) || int8send(verb_audit_append.audit_id)
                               || convert_to(p_canonical, 'UTF8'))
        WHERE h.company_id = p_company AND h.lane = v_lane
        RETURNING h.seq, h.prev_hash, h.head_hash INTO seq, v_prev, v_hash;
    IF NOT FOUND THEN
        -- first row of the lane: a concurrent first append waits here, then sees the head
        INSERT INTO verb_audit_heads (company_id, lane, seq, head_hash)
            VALUES (p_company, v_lane, 0, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
            ON CONFLICT (company_id, lane) DO NOTHING;
        UPDATE verb_audit_heads h SET seq = h.seq + 1, prev_hash = h.head_hash,
                head_hash = sha256(h.head_hash || int8send(h.seq + 1) || int8send(verb_audit_append.audit_id)
                                   || convert_to(p_canonical, 'UTF8'))
            WHERE h.company_id = p_company AND h.lane = v_lane
            RETURNING h.seq, h.prev_hash, h.head_hash INTO STRICT seq, v_prev, v_hash;
    END IF;
    INSERT INTO verb_audit_log (audit_id, company_id, lane, seq, created_at, verb, decision, status, subject,
                                entry, prev_hash, row_hash)
        VALUES (verb_audit_append.audit_id, p_company, v_lane, verb_audit_append.seq, p_created_at, p_verb,
                p_decision, p_status, p_subject, p_entry, v_prev, v_hash);
END $$;

-- 0035: verb_audit_append writes the lane head once per row instead of twice. 0030/0033 bumped the
-- head with INSERT .. ON CONFLICT DO UPDATE and then updated it again with the new hash (two row
-- versions of the hottest rows per dispatch); the head is now locked with SELECT .. FOR UPDATE
-- (created on a lane's first append) and written once. Same lanes (0033), chain, lock order, rows.
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
    SELECT h.seq + 1, h.head_hash INTO seq, v_prev
        FROM verb_audit_heads h WHERE h.company_id = p_company AND h.lane = v_lane FOR UPDATE;
    IF NOT FOUND THEN
        -- first row of the lane: a concurrent first append waits here, then sees the head
        INSERT INTO verb_audit_heads (company_id, lane, seq, head_hash)
            VALUES (p_company, v_lane, 0, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
            ON CONFLICT (company_id, lane) DO NOTHING;
        SELECT h.seq + 1, h.head_hash INTO STRICT seq, v_prev
            FROM verb_audit_heads h WHERE h.company_id = p_company AND h.lane = v_lane FOR UPDATE;
    END IF;
    audit_id := nextval('verb_audit_id_seq');
    v_hash := sha256(v_prev || int8send(seq) || int8send(audit_id) || convert_to(p_canonical, 'UTF8'));
    INSERT INTO verb_audit_log (audit_id, company_id, lane, seq, created_at, verb, decision, status, subject,
                                entry, prev_hash, row_hash)
        VALUES (audit_id, p_company, v_lane, seq, p_created_at, p_verb, p_decision, p_status, p_subject,
                p_entry, v_prev, v_hash);
    UPDATE verb_audit_heads h SET seq = verb_audit_append.seq, head_hash = v_hash
        WHERE h.company_id = p_company AND h.lane = v_lane;
END $$;

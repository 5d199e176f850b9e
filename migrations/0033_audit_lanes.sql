-- 0033: audit lanes. Each company's audit chain is split into 16 lanes (chains), one per hash of
-- the principal's subject, each with its own head. Why: the head row is locked from the append to
-- the end of COMMIT (WAL flush, ~3 ms on a plain disk), so one head per company caps a company's
-- audited writes at one per flush. Append-only and tamper evidence hold per lane; `audit verify`
-- walks every lane; only the order across lanes is unhashed (audit_id and time give it).
-- Existing rows and heads become lane 0 unchanged (same hashes: the lane is not hashed; moving a
-- row to another lane breaks both lanes' prev_hash links).
ALTER TABLE verb_audit_heads ADD COLUMN lane smallint NOT NULL DEFAULT 0 CHECK (lane BETWEEN 0 AND 15);
ALTER TABLE verb_audit_heads DROP CONSTRAINT verb_audit_heads_pkey;
ALTER TABLE verb_audit_heads ADD PRIMARY KEY (company_id, lane);
ALTER TABLE verb_audit_log ADD COLUMN lane smallint NOT NULL DEFAULT 0 CHECK (lane BETWEEN 0 AND 15);
ALTER TABLE verb_audit_log DROP CONSTRAINT verb_audit_log_company_id_seq_key;
ALTER TABLE verb_audit_log ADD CONSTRAINT verb_audit_log_lane_seq UNIQUE (company_id, lane, seq);

-- Same signature as 0030, so every caller is unchanged. One lane per transaction (the first
-- append's, kept in the transaction-local setting app.audit_lane): a transaction never locks two
-- heads, so group transactions cannot deadlock on them. The lane head is locked with SELECT .. FOR
-- UPDATE (created on the lane's first append) and written once per row (0030 wrote it twice: two
-- row versions of the hottest row per dispatch).
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

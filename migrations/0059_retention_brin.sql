-- 0059: the retention sweeper (ucp_gateway.retention) deletes rows that decide nothing any more:
-- expired idempotency records, spent consent nonces past the longest nonce life, wrong-phrase
-- counters past their nonce's expiry. It finds them by time. Rows are written in time order, so a
-- BRIN index (a few pages, next to nothing per insert) finds the old ones; 0055 dropped the B-tree
-- expiry index of verb_idempotency because every write dispatch paid for it.
-- autosummarize: a filled block range is summarized by autovacuum without waiting for a VACUUM.
-- commerce_idempotency and webmcp_sessions already have B-tree indexes on their expiry.
CREATE INDEX verb_idempotency_expiry_brin ON verb_idempotency USING brin (expires_at) WITH (autosummarize = on);
CREATE INDEX verb_nonces_used_brin ON verb_nonces USING brin (used_at) WITH (autosummarize = on);
CREATE INDEX verb_nonce_mismatches_expiry_brin ON verb_nonce_mismatches USING brin (expires_at)
    WITH (autosummarize = on);

-- 0060: the retention sweeper also deletes abandoned checkout sessions (expired, never an order)
-- and webhook events no longer queued, 30 days on (ucp_gateway.retention.COMMERCE_KEEP). It finds
-- them by time: a BRIN index on the time each is judged by (a few pages; next to nothing per
-- insert, and the column is never updated, so checkout updates stay HOT).
CREATE INDEX checkout_sessions_expires_brin ON checkout_sessions USING brin (expires_at) WITH (autosummarize = on);
CREATE INDEX webhook_outbox_created_brin ON webhook_outbox USING brin (created_at) WITH (autosummarize = on);

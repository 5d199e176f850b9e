-- 0041: keep rows of up to a page uncompressed and in line on the tables every checkout call
-- writes (the rendered checkout body is 2-4 kB; the order webhook payload and the UCP
-- idempotency record's response body are alike). pglz compression of these values cost more
-- database CPU than the rest of each write, and checkout rows are rewritten on every call.
-- Larger rows are still compressed and moved out of line as before.
ALTER TABLE checkout_sessions SET (toast_tuple_target = 8160);
ALTER TABLE webhook_outbox SET (toast_tuple_target = 8160);
ALTER TABLE commerce_idempotency SET (toast_tuple_target = 8160);

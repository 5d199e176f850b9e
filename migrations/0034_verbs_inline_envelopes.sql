-- 0034: keep idempotency records of up to a page uncompressed and in line. The stored envelope
-- (a receipt with the exact response text, 2-4 kB) is written once per write dispatch; pglz
-- compression of it cost more database CPU than the rest of the row's write. Larger rows are
-- still compressed and moved out of line as before. Records expire after verbs_idempotency_ttl.
ALTER TABLE verb_idempotency SET (toast_tuple_target = 8160);

-- 0054: the rendered checkout resource (checkout_sessions.body) as json instead of jsonb. It is
-- written whole on every checkout call (three times per flow, 2-4 kB) and only ever read back
-- whole (GET, cancel, expiry); no query looks inside it. json keeps the text as written after
-- checking it, where jsonb builds and sorts a binary tree of it: about a third of the database's
-- work per write of it. A GET now returns the body's keys in the order the call that wrote it
-- answered them. state (queried with ->, ->>) stays jsonb.
ALTER TABLE checkout_sessions ALTER COLUMN body TYPE json USING body::json;

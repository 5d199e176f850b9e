-- 0083: staff (admin API) tokens can expire (ucp_gateway.keys.admin_tokens).
--
-- expires_at: after it the token authenticates nothing (NULL: until revoked). Every request reads
-- the row (no cache), so a revocation or an expiry holds on every process at once.
ALTER TABLE admin_tokens ADD COLUMN expires_at timestamptz;

-- 0011: RFC 9421 replay cache on (keyid, nonce), shared by every replica (ucp_gateway.httpsig.replay).
-- A platform table, not tenant data: keyids belong to callers' profiles, not to one company.
CREATE TABLE signature_nonces (
    keyid       text NOT NULL,
    nonce       text NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (keyid, nonce)
);
CREATE INDEX signature_nonces_expiry ON signature_nonces (expires_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON signature_nonces TO ucp_app;

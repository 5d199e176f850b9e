-- 0058: at most 3 wrong typed phrases per consent nonce (solid-verbs digest §8 G2, step 4: "a
-- mismatch does not consume the nonce, but allow at most 3 attempts per nonce"). One row per nonce
-- that saw a wrong phrase; the third mismatch also spends the nonce in verb_nonces, so a later
-- confirm, even with the right phrase, is refused (nonce_used) and needs a fresh preflight.
-- expires_at: when the nonce itself expires; rows past it decide nothing and may be deleted.
CREATE TABLE verb_nonce_mismatches (
    company_id uuid NOT NULL,
    nonce_id   text NOT NULL,
    mismatches integer NOT NULL CHECK (mismatches > 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (company_id, nonce_id)
);
SELECT tenant_table('verb_nonce_mismatches'::regclass);
GRANT SELECT, INSERT, UPDATE, DELETE ON verb_nonce_mismatches TO ucp_app;

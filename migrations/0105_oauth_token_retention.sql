-- 0105: the retention sweeper removes OAuth access tokens once they expired (ucp_gateway.retention):
-- an expired token is refused whatever its row says (access/proofs.py reads expires_at > now). It
-- finds them as ucp_scan (0090), which sees company_id and expires_at only, by the BRIN index of 0071.
-- The client assertions' jtis live in the replay cache (signature_nonces), which the key scheduler
-- empties of expired rows.
GRANT SELECT (company_id, expires_at) ON oauth_access_tokens TO ucp_scan;
CREATE POLICY retention_scan ON oauth_access_tokens FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');

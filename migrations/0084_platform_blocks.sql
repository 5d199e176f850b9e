-- 0084: operator blocks on buyer agents and purges of cached platform profiles, per company
-- (ucp_gateway.httpsig.blocks).
--
-- platform_blocks: a platform key by kid or RFC 7638 thumbprint, or a platform profile URL, that
-- the company refuses; every process re-reads a company's blocks every block_cache_ttl seconds.
-- profile_purges: the last time the company asked every process to drop its cached copy of a
-- profile (one row per URL, updated by each purge).
CREATE TABLE platform_blocks (
    company_id  uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    kind        text NOT NULL CHECK (kind IN ('kid', 'thumbprint', 'profile')),
    value       text NOT NULL CHECK (length(value) BETWEEN 1 AND 2048),
    reason      text NOT NULL DEFAULT '' CHECK (length(reason) <= 500),
    created_by  text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (company_id, kind, value)
);
SELECT tenant_table('platform_blocks');
GRANT SELECT, INSERT, DELETE ON platform_blocks TO ucp_app;

CREATE TABLE profile_purges (
    company_id   uuid NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    profile_url  text NOT NULL CHECK (length(profile_url) BETWEEN 1 AND 2048),
    purged_at    timestamptz NOT NULL,
    PRIMARY KEY (company_id, profile_url)
);
SELECT tenant_table('profile_purges');
GRANT SELECT, INSERT, UPDATE ON profile_purges TO ucp_app;

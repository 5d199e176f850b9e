-- 0093: the host cache (tenancy.HostCache) keeps each Host's company with its profile version
-- (migration 0092) and, when the entry's time is up, revalidates many Hosts in one read: the
-- hostname -> company directory is public, and the version stamps (random, nothing else) are
-- readable across companies only under the explicit scan scope 'host_directory'.
CREATE POLICY host_directory ON profile_versions FOR SELECT
    USING (current_setting('app.platform_scan', true) = 'host_directory');

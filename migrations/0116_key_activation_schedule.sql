-- 0116: a scheduled activation of a pending signing key. activate_at NULL: the default rule (the
-- scheduler activates the oldest pending key once it was published keys_publish_min); a time: the
-- scheduler activates that key then, not before (never earlier than keys_publish_min after it was
-- published, which the repository checks when the schedule is set).
ALTER TABLE company_keys ADD COLUMN activate_at timestamptz;
-- the key scheduler's due scan (role ucp_scan, scope key_schedule, migration 0090) reads it too
GRANT SELECT (activate_at) ON company_keys TO ucp_scan;

-- The settings that make a commit durable, as a session of this database and
-- role sees them (the load test reports them with every measured run).
SELECT current_setting('fsync'),
       current_setting('synchronous_commit'),
       current_setting('full_page_writes')

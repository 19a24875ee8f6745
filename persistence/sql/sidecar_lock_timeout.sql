-- How long a sidecar range DDL waits for the parent table's lock before it
-- gives up (and is retried on the next pass): pushes that need the same lock
-- queue behind a waiting DDL, so the wait must stay short. $1 in
-- milliseconds, for this transaction only.
SELECT set_config('lock_timeout', ($1::int)::text || 'ms', true)

-- The lock_timeout of this session (not of one transaction): for statements
-- that cannot run in a transaction block (a concurrent detach). $1 in
-- milliseconds; 0 turns it off.
SELECT set_config('lock_timeout', ($1::int)::text || 'ms', false)

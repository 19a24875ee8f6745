-- Restores the lock_timeout of this session to $1, a value read by
-- session_lock_timeout_read.
SELECT set_config('lock_timeout', $1, false)

-- The lock_timeout of this session, as text, to restore it with
-- session_lock_timeout_restore after session_lock_timeout changed it.
SELECT current_setting('lock_timeout')

-- Session-level advisory lock held while migrations run, so brokers starting
-- together apply them once.
SELECT pg_advisory_lock(7307011042981447)

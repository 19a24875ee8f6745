-- Tries the migration lock (migrate_lock) without waiting: true when taken.
-- Migrate tries first, so it can log that another session holds it.
SELECT pg_try_advisory_lock(7307011042981447)

-- The session holding the migration lock (migrate_lock's key 7307011042981447
-- = 1701296 << 32 | 362165831, a bigint advisory lock: objsubid 1), for the
-- line Migrate logs while it waits: pid, application_name, client address
-- ('local' over a Unix socket) and when it connected. No row when the lock
-- was released meanwhile; application_name and the address read empty for
-- another role's session without pg_read_all_stats.
SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'),
       coalesce(a.backend_start, clock_timestamp())
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = 1701296 AND l.objid = 362165831 AND l.objsubid = 1
LIMIT 1

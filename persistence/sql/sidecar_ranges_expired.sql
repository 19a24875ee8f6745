-- The ranges of log_txn_hashes that can be dropped (SPEC.md §7), oldest
-- first, at most $2: every row in them is older than the largest sidecar
-- floor over all queues, GREATEST(dedupWindowSeconds,
-- completedRetentionSeconds, $1 seconds - the floor), and no log_txns row
-- older than their upper bound is left, so none of their rows still counts
-- (a per-hash row counts only while its segment's log_txns row exists). The
-- DEFAULT partition is never listed. Reads the catalog and one descent of
-- log_txns_created_at per range.
WITH f AS MATERIALIZED (
    SELECT clock_timestamp() - make_interval(secs => GREATEST(
               (SELECT max(GREATEST(q.dedup_window_seconds::float8,
                                    COALESCE((q.options ->> 'completedRetentionSeconds')::float8, 0)))
                  FROM queen.queues q),
               $1::float8)) AS cutoff
), r AS (
    SELECT c.relname::text AS name,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'queen.log_txn_hashes'::regclass
)
SELECT r.name, r.hi
  FROM r, f
 WHERE r.hi IS NOT NULL
   AND r.hi < f.cutoff
   AND NOT EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.created_at < r.hi)
 ORDER BY r.hi
 LIMIT $2::int

-- The sidecar ranges that can be dropped (SPEC.md §7), oldest first, at
-- most $2: every entry in them is older than the largest sidecar floor over
-- all queues, GREATEST(dedupWindowSeconds, completedRetentionSeconds, $1
-- seconds - the floor), and no log_txns row older than their upper bound is
-- left, so none of their entries still counts (an entry counts only while
-- its segment's log_txns row exists). Reads queen.sidecar_ranges and one
-- descent of log_txns_created_at per range.
WITH f AS MATERIALIZED (
    SELECT clock_timestamp() - make_interval(secs => GREATEST(
               (SELECT max(GREATEST(q.dedup_window_seconds::float8,
                                    COALESCE((q.options ->> 'completedRetentionSeconds')::float8, 0)))
                  FROM queen.queues q),
               $1::float8)) AS cutoff
)
SELECT r.lo, r.hi
  FROM queen.sidecar_ranges r, f
 WHERE r.hi < f.cutoff
   AND NOT EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.created_at < r.hi)
 ORDER BY r.lo
 LIMIT $2::int

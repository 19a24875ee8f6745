-- The sidecar ranges that can be dropped (SPEC.md §7), oldest first, at
-- most $2: every entry in them is older than the largest sidecar floor over
-- all queues, GREATEST(dedupWindowSeconds, completedRetentionSeconds, $1
-- seconds - the floor), so none of their entries counts any more (migration
-- 0017: entries are self-contained and expire with their range). Reads
-- queen.sidecar_ranges.
WITH f AS MATERIALIZED (
    SELECT clock_timestamp() - make_interval(secs => GREATEST(queen.sidecar_floor(), $1::float8)) AS cutoff
)
SELECT r.lo, r.hi
  FROM queen.sidecar_ranges r, f
 WHERE r.hi < f.cutoff
 ORDER BY r.lo
 LIMIT $2::int

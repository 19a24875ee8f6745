-- The largest sidecar floor the queues ask for, in seconds (SPEC.md §7):
-- GREATEST(dedupWindowSeconds, completedRetentionSeconds) over all queues,
-- 0 when there is none. A hash entry may count for that long; the
-- retention statements add the broker's own floor (RetentionConfig.TxnsFloor),
-- and sidecar_compact sizes its level-1 tables by it (migration 0023).
CREATE OR REPLACE FUNCTION queen.sidecar_floor() RETURNS float8
    LANGUAGE sql STABLE
AS $$
    SELECT COALESCE(max(GREATEST(q.dedup_window_seconds::float8,
                                 COALESCE((q.options ->> 'completedRetentionSeconds')::float8, 0))), 0)
      FROM queen.queues q
$$;

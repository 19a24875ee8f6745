-- Drops the range [lo, hi) once none of its hashes counts any more: its
-- level-1 table, or its level-0 table when it was never compacted, its
-- fingerprints (migration 0021) and its listing. The caller found hi older than every queue's sidecar floor
-- (sidecar_ranges_expired); after the DROP holds its locks the check runs
-- again against the windows and completed retentions of now (a configure
-- that widened one meanwhile), and the drop is undone by an error when the
-- range is still in use.
CREATE OR REPLACE FUNCTION queen.sidecar_expire(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    n text := CASE WHEN (SELECT r.bits FROM queen.sidecar_ranges r WHERE r.lo = sidecar_expire.lo) IS NULL
                   THEN queen.sidecar_range_name(lo) ELSE queen.hash_blocks_name(lo) END;
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        EXECUTE format('DROP TABLE queen.%I', n);
    END IF;
    IF hi >= clock_timestamp() - make_interval(secs => COALESCE(
              (SELECT max(GREATEST(q.dedup_window_seconds::float8,
                                   COALESCE((q.options ->> 'completedRetentionSeconds')::float8, 0)))
                 FROM queen.queues q), 0)) THEN
        RAISE EXCEPTION 'sidecar range % is still in use', n USING ERRCODE = 'object_in_use';
    END IF;
    DELETE FROM queen.hash_prints p WHERE p.lo = sidecar_expire.lo;
    DELETE FROM queen.hash_prints_alive a WHERE a.lo = sidecar_expire.lo;
    DELETE FROM queen.sidecar_ranges r WHERE r.lo = sidecar_expire.lo;
    DELETE FROM queen.sidecar_alive a WHERE a.lo = sidecar_expire.lo;
    RETURN true;
END
$$;

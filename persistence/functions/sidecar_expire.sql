-- Drops the range [lo, hi) once none of its hashes counts any more (no
-- log_txns row older than hi is left): its level-1 table, or its level-0
-- table when it was never compacted, and its listing. False when it does
-- not drop. The check runs again after the DROP holds its locks.
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
    IF EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.created_at < hi) THEN
        RAISE EXCEPTION 'sidecar range % is still in use', n USING ERRCODE = 'object_in_use';
    END IF;
    DELETE FROM queen.sidecar_ranges r WHERE r.lo = sidecar_expire.lo;
    DELETE FROM queen.sidecar_alive a WHERE a.lo = sidecar_expire.lo;
    RETURN true;
END
$$;

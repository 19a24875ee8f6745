-- Drops the range [lo, hi) once none of its hashes counts any more: its
-- level-0 table when it was never compacted, its fingerprints (migration
-- 0021) and its listing. A compacted range's blocks stay in its level-1
-- table (migration 0023) while a later range of the table is listed: the
-- table's lo moves past the range, so lookups skip them; the table is
-- dropped with its last range, and its merged index (migration 0027) with
-- it. The caller found hi older than every queue's
-- sidecar floor (sidecar_ranges_expired); after the DROP holds its locks the
-- check runs again against the windows and completed retentions of now (a
-- configure that widened one meanwhile), and the drop is undone by an error
-- when the range is still in use.
CREATE OR REPLACE FUNCTION queen.sidecar_expire(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    k    integer;
    w    timestamptz;
    n    text;
    m    text;
    next timestamptz;
BEGIN
    SELECT s.bits, s.wide INTO k, w FROM queen.sidecar_ranges s WHERE s.lo = sidecar_expire.lo;
    IF k IS NULL THEN
        n := queen.sidecar_range_name(lo);
    ELSE
        SELECT min(s.lo) INTO next FROM queen.sidecar_ranges s
         WHERE s.wide = w AND s.lo <> sidecar_expire.lo;
        IF next IS NULL THEN
            n := queen.hash_blocks_name(w);
            m := 'hash_merged_' || substr(n, length('hash_blocks_') + 1);
            DELETE FROM queen.sidecar_tables t WHERE t.wide = w;
            DELETE FROM queen.hash_merged_alive a WHERE a.wide = w;
        ELSE
            UPDATE queen.sidecar_tables t SET lo = greatest(t.lo, next) WHERE t.wide = w;
        END IF;
    END IF;
    IF n IS NOT NULL AND to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        EXECUTE format('DROP TABLE queen.%I', n);
    END IF;
    IF m IS NOT NULL AND to_regclass(format('queen.%I', m)) IS NOT NULL THEN
        EXECUTE format('DROP TABLE queen.%I', m);
    END IF;
    IF hi >= clock_timestamp() - make_interval(secs => queen.sidecar_floor()) THEN
        RAISE EXCEPTION 'sidecar range % is still in use', queen.sidecar_range_name(lo) USING ERRCODE = 'object_in_use';
    END IF;
    DELETE FROM queen.hash_prints p WHERE p.lo = sidecar_expire.lo;
    DELETE FROM queen.hash_prints_alive a WHERE a.lo = sidecar_expire.lo;
    DELETE FROM queen.sidecar_ranges s WHERE s.lo = sidecar_expire.lo;
    DELETE FROM queen.sidecar_alive a WHERE a.lo = sidecar_expire.lo;
    RETURN true;
END
$$;

-- Creates the range [lo, hi) of segments_timed unless a table of its name
-- exists, and lists it in segment_ranges; true when it created it. Ranges
-- are insert-only and dropped whole, so autovacuum is off on them
-- (PostgreSQL still vacuums a table whose transaction ids near
-- wraparound). The table is made alone, then attached (a SHARE UPDATE
-- EXCLUSIVE lock on segments_timed, which pushes and reads do not wait
-- for); callers set a short lock_timeout first.
CREATE OR REPLACE FUNCTION queen.segment_create_range(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    n text := queen.segment_range_name(lo, (extract(epoch FROM hi - lo) / 60)::int);
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE queen.%I (LIKE queen.segments INCLUDING DEFAULTS) '
                   'WITH (autovacuum_enabled = false, toast.autovacuum_enabled = false)', n);
    PERFORM queen.segment_storage(n);
    -- The constraint lets ATTACH skip its check of the rows (there are none).
    EXECUTE format('ALTER TABLE queen.%I ADD CONSTRAINT %I CHECK (timed AND created_at >= %L AND created_at < %L)', n, n || '_bounds', lo, hi);
    EXECUTE format('ALTER TABLE queen.segments_timed ATTACH PARTITION queen.%I FOR VALUES FROM (%L) TO (%L)', n, lo, hi);
    INSERT INTO queen.segment_ranges (name, lo, hi) VALUES (n, lo, hi);
    RETURN true;
END
$$;

-- Drops table n, a range detached from segments_timed (DETACH PARTITION
-- ... CONCURRENTLY, run by the caller: it takes no lock that pushes or
-- reads wait for), with upper bound hi, when every row in it is past its
-- queue's retentionSeconds now (no keeper left), and unlists it; else (a
-- configure raised a retention since the caller checked) attaches it back.
-- True when it dropped it. The table is no partition any more, so the
-- DROP locks nothing that pushes or reads use.
CREATE OR REPLACE FUNCTION queen.segment_drop_detached(n text, lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NULL THEN
        DELETE FROM queen.segment_ranges WHERE name = n;
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = format('queen.%I', n)::regclass) THEN
        RETURN false; -- still (or again) a partition
    END IF;
    IF hi > clock_timestamp() OR queen.segment_range_keepers(n, hi, clock_timestamp()) > 0 THEN
        EXECUTE format('ALTER TABLE queen.segments_timed ATTACH PARTITION queen.%I FOR VALUES FROM (%L) TO (%L)', n, lo, hi);
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE queen.%I', n);
    DELETE FROM queen.segment_ranges WHERE name = n;
    RETURN true;
END
$$;

-- True when every level-0 range ending after `after` is alive; raises QS001
-- naming the first that is not (a crash emptied it). A caller that has
-- checked once for a statement passes checked to queen.sidecar_find.
CREATE OR REPLACE FUNCTION queen.sidecar_assert_alive(after timestamptz) RETURNS boolean
    LANGUAGE plpgsql STABLE
AS $$
DECLARE
    lost timestamptz;
BEGIN
    SELECT r.lo INTO lost
      FROM queen.sidecar_ranges r
     WHERE r.bits IS NULL AND r.hi > after
       AND NOT EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = r.lo)
     ORDER BY r.lo
     LIMIT 1;
    IF lost IS NOT NULL THEN
        PERFORM queen.sidecar_lost(lost, false);
    END IF;
    RETURN true;
END
$$;

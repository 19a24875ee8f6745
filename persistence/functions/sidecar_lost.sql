-- False when the level-0 range starting at lo is alive; raises QS001 when
-- it is not (a crash emptied it). One function, so that no plan can run the
-- raise before the test.
CREATE OR REPLACE FUNCTION queen.sidecar_lost(lo timestamptz, alive boolean) RETURNS boolean
    LANGUAGE plpgsql
AS $$
BEGIN
    IF alive THEN
        RETURN false;
    END IF;
    RAISE EXCEPTION 'sidecar range from % is being rebuilt after a database restart', lo
        USING ERRCODE = 'QS001';
END
$$;

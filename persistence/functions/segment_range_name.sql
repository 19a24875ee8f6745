-- The name of the range [lo, lo + minutes).
CREATE OR REPLACE FUNCTION queen.segment_range_name(lo timestamptz, minutes int) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'segments_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MI') || '_' || minutes || 'm' $$;

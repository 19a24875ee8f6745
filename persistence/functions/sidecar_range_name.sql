-- The name of the range starting at lo.
CREATE OR REPLACE FUNCTION queen.sidecar_range_name(lo timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'log_txn_hashes_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS') $$;

-- The name of the level-1 table of the range starting at lo.
CREATE OR REPLACE FUNCTION queen.hash_blocks_name(lo timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'hash_blocks_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS') $$;

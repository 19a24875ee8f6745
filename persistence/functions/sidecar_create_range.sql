-- A new level-0 range: unlogged, listed, alive. True when it created it.
CREATE OR REPLACE FUNCTION queen.sidecar_create_range(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    n text := queen.sidecar_range_name(lo);
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE UNLOGGED TABLE queen.%I PARTITION OF queen.log_txn_hashes FOR VALUES FROM (%L) TO (%L) WITH (autovacuum_enabled = false)', n, lo, hi);
    INSERT INTO queen.sidecar_ranges (lo, hi) VALUES (lo, hi)
        ON CONFLICT DO NOTHING;
    INSERT INTO queen.sidecar_alive (lo) VALUES (lo) ON CONFLICT DO NOTHING;
    RETURN true;
END
$$;

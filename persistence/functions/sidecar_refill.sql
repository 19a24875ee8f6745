-- Re-fills the level-0 range [lo, hi) from the hashes of its segments after
-- a crash emptied it (the current range, or one ahead of it) and lists it
-- alive. Rows pushed since the crash are there already: a hash twice in
-- level 0 is harmless (a lookup takes the lowest offset). Retention leaves
-- the segments of a range alone until it is compacted (migration 0017), so
-- every hash of the range is there. Returns the rows written.
CREATE OR REPLACE FUNCTION queen.sidecar_refill(lo timestamptz, hi timestamptz) RETURNS bigint
    LANGUAGE plpgsql
AS $$
DECLARE
    cnt bigint;
BEGIN
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT n.id, encode(substring(t.hashes FROM g.i * 16 + 1 FOR 16), 'hex')::uuid,
           t.first_offset + g.i, t.first_offset, t.created_at
      FROM queen.segments t
      JOIN queen.partitions n ON n.num = t.partition_num
     CROSS JOIN LATERAL generate_series(0, length(t.hashes) / 16 - 1) AS g (i)
     WHERE t.created_at >= lo AND t.created_at < hi;
    GET DIAGNOSTICS cnt = ROW_COUNT;
    INSERT INTO queen.sidecar_alive (lo) VALUES (lo) ON CONFLICT DO NOTHING;
    RETURN cnt;
END
$$;

-- Writes the fingerprints (queen.hash_prints, migration 0021) of the
-- compacted range starting at lo from its level-1 blocks, which name each
-- hash's partition (by its number, migration 0024), and lists them
-- complete: for a range compacted by a release before 0.4.4, or whose
-- fingerprints a crash or a failover emptied (they are unlogged; the
-- blocks are not), read from the range's rows of its level-1 table
-- (migration 0023). In the caller's
-- transaction. Returns the hashes read, or -1 when the range is not
-- compacted or its fingerprints are complete.
CREATE OR REPLACE FUNCTION queen.sidecar_prints_refill(lo timestamptz) RETURNS bigint
    LANGUAGE plpgsql
AS $$
DECLARE
    cnt bigint;
    w   timestamptz;
BEGIN
    SELECT r.wide INTO w FROM queen.sidecar_ranges r WHERE r.lo = sidecar_prints_refill.lo AND r.bits IS NOT NULL FOR UPDATE;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM queen.hash_prints_alive a WHERE a.lo = sidecar_prints_refill.lo) THEN
        RETURN -1;
    END IF;
    PERFORM set_config('max_parallel_workers_per_gather', '0', true);
    PERFORM set_config('work_mem', '64MB', true);
    DELETE FROM queen.hash_prints p WHERE p.lo = sidecar_prints_refill.lo;
    INSERT INTO queen.hash_prints (lo, partition_id, prints)
    SELECT sidecar_prints_refill.lo, n.id, string_agg(substring(uuid_send(k.hashes[g.i]) FROM 1 FOR 4), ''::bytea)
      FROM queen.hash_blocks k
     CROSS JOIN LATERAL generate_subscripts(k.hashes, 1) AS g (i)
     CROSS JOIN LATERAL queen.hash_entry(k.entries, g.i) e
      JOIN queen.partitions n ON n.num = e.num
     WHERE k.wide = w AND k.lo = sidecar_prints_refill.lo
     GROUP BY n.id;
    SELECT COALESCE(sum(cardinality(k.hashes)), 0) INTO cnt
      FROM queen.hash_blocks k
     WHERE k.wide = w AND k.lo = sidecar_prints_refill.lo;
    INSERT INTO queen.hash_prints_alive (lo) VALUES (sidecar_prints_refill.lo);
    RETURN cnt;
END
$$;

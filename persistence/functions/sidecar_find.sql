-- Where a hash h of partition p may be (SPEC.md §3, §4, §13): its sidecar
-- entries created after `after` and within [since, until], each as the
-- offset, the first offset of its segment and its created_at, from level 0
-- (one index descent per range, the DEFAULT partition included) and level 1
-- (per level-1 table in the span, migration 0023: the bucket's row of its
-- merged index when the table is closed and merged, migration 0027, and
-- the bucket's rows of the table only when a print in it matches, usually
-- not; otherwise one primary-key descent and the bucket's row of each of
-- the table's listed ranges from the one holding `since` on, 0.6.9). A
-- range that expired before its table keeps
-- its rows there, and its place in the merged index, until the table goes,
-- below the table's lo, which skips them). Both levels
-- are self-contained (migration 0017): an entry names its partition (at
-- level 1 by its number, migration 0024: one primary-key read of
-- queen.partitions per hash found in a bucket, none otherwise) and
-- carries its created_at, so no segment is read and an entry counts while
-- its range lives, its segment gone or not. Raises QS001 when a level-0
-- range the span needs was emptied by a crash and is not rebuilt yet,
-- unless checked (the caller ran queen.sidecar_assert_alive for the
-- statement). The hash's bucket in a level-1 table is its top `bits` bits
-- (queen.sidecar_tables).
CREATE OR REPLACE FUNCTION queen.sidecar_find(p uuid, h uuid, after timestamptz, since timestamptz, until timestamptz, checked boolean)
    RETURNS TABLE ("offset" bigint, segment bigint, created_at timestamptz)
    LANGUAGE sql STABLE
AS $$
    SELECT x."offset", x.segment, x.created_at
      FROM queen.log_txn_hashes x
     WHERE x.partition_id = p
       AND x.hash = h
       AND x.created_at > after
       AND x.created_at >= since
       AND x.created_at <= until
       AND (checked OR NOT EXISTS (SELECT 1
                         FROM queen.sidecar_ranges r
                        WHERE r.bits IS NULL AND r.hi > after AND r.hi > since AND r.lo <= until
                          AND queen.sidecar_lost(r.lo, EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = r.lo))))
    UNION ALL
    SELECT e.first + e.idx, e.first, e.stamp
      FROM queen.sidecar_tables t
      LEFT JOIN queen.hash_merged_alive a ON a.wide = t.wide AND a.complete
     CROSS JOIN LATERAL (
        -- A merged table (migration 0027): its one row of the hash's
        -- bucket names the ranges whose row may hold the hash (its print,
        -- the first 8 bytes, matches), usually none. NULL: not merged,
        -- every range is read.
        SELECT CASE WHEN a.wide IS NOT NULL THEN ARRAY(
                   SELECT a.los[get_byte(x.ranges, j - 1) + 1]
                     FROM queen.hash_merged x
                    CROSS JOIN LATERAL unnest(array_positions(x.prints, ('x' || replace(substr(h::text, 1, 18), '-', ''))::bit(64)::bigint)) AS j
                    WHERE x.wide = t.wide
                      AND x.bucket = ('x' || substr(h::text, 1, 8))::bit(32)::bigint >> (32 - a.bits)) END AS los
     ) r
     CROSS JOIN LATERAL (
        SELECT k.hashes, k.entries
          FROM queen.hash_blocks k
         WHERE (r.los IS NULL OR cardinality(r.los) > 0)
           AND k.wide = t.wide
           AND k.bucket = ('x' || substr(h::text, 1, 8))::bit(32)::bigint >> (32 - t.bits)
           -- Not merged (r.los NULL): only the ranges from the one that
           -- holds `since` on. A range's rows are stamped inside it and
           -- ranges do not overlap, so the rows of earlier ranges cannot
           -- match; a range no longer listed leaves the bound lower,
           -- never higher. A suspect's span is a cache generation (an
           -- eighth of the window), and an open table grows a row per
           -- bucket a range (up to 16): without the bound, its lookups
           -- read every row since the table's lo, more each minute. The
           -- bound is looked up only where it can skip a row: a table of
           -- several ranges whose lo is before `since`.
           AND k.lo >= GREATEST(t.lo, CASE WHEN r.los IS NULL AND t.ranges > 1 AND since > t.lo THEN
                   (SELECT max(s.lo) FROM queen.sidecar_ranges s WHERE s.lo <= since) END)
           AND k.lo <= until
           AND (r.los IS NULL OR k.lo = ANY (r.los))
        OFFSET 0
     ) k
     CROSS JOIN LATERAL unnest(array_positions(k.hashes, h)) AS i
     CROSS JOIN LATERAL queen.hash_entry(k.entries, i) e
     WHERE t.hi > after AND t.hi > since AND t.lo <= until
       AND e.num = (SELECT n.num FROM queen.partitions n WHERE n.id = p)
       AND e.stamp > after AND e.stamp >= since AND e.stamp <= until
$$;

-- Where a hash h of partition p may be (SPEC.md §3, §4, §13): its sidecar
-- entries created after `after` and within [since, until], each as the
-- offset, the first offset of its segment and its created_at, from level 0
-- (one index descent per range, the DEFAULT partition included) and level 1
-- (one primary-key descent per compacted range in the span). An entry
-- counts only while its log_txns row exists (level 1 reads the hash back
-- from it). Raises QS001 when a level-0 range the span needs was emptied by
-- a crash and is not rebuilt yet, unless checked (the caller ran
-- queen.sidecar_assert_alive for the statement). The hash's bucket in a
-- compacted range is its top `bits` bits.
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
       AND EXISTS (SELECT 1 FROM queen.log_txns t
                    WHERE t.partition_id = x.partition_id AND t.first_offset = x.segment
                   OFFSET 0)
       -- (The raise sits in the WHERE: an EXISTS never evaluates its
       -- select list.)
       AND (checked OR NOT EXISTS (SELECT 1
                         FROM queen.sidecar_ranges r
                        WHERE r.bits IS NULL AND r.hi > after AND r.hi > since AND r.lo <= until
                          AND queen.sidecar_lost(r.lo, EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = r.lo))))
    UNION ALL
    SELECT t.first_offset + k.idxs[i], t.first_offset, t.created_at
      FROM queen.sidecar_ranges r
     CROSS JOIN LATERAL (
        SELECT k.hashes, k.firsts, k.idxs
          FROM queen.hash_blocks k
         WHERE k.lo = r.lo
           AND k.bucket = ('x' || substr(h::text, 1, 8))::bit(32)::bigint >> (32 - r.bits)
        OFFSET 0
     ) k
     CROSS JOIN LATERAL unnest(array_positions(k.hashes, h)) AS i
     CROSS JOIN LATERAL (
        SELECT t.first_offset, t.created_at
          FROM queen.log_txns t
         WHERE t.partition_id = p AND t.first_offset = k.firsts[i]
           AND substring(t.hashes FROM k.idxs[i] * 16 + 1 FOR 16) = uuid_send(h)
        OFFSET 0
     ) t
     WHERE r.bits IS NOT NULL AND r.hi > after AND r.hi > since AND r.lo <= until
       AND t.created_at > after AND t.created_at >= since AND t.created_at <= until
$$;

-- Writes a bundle's or a transaction's level-0 sidecar rows (one
-- log_txn_hashes row per frame) and bumps each allocator (its row of
-- queen.partition_ends, migration 0019) to its partition's last new offset,
-- while the row locks are held. Its segments were written just before, by
-- COPY in the same transaction (persistence.bundleRows.copySegments: one
-- WAL record per page of segment rows, where one INSERT wrote one per row),
-- with the same stamp, $1 (bundle_stamp).
-- Per segment (parallel arrays): $2 partition id, $3 last offset. Per frame
-- (parallel arrays): $4 partition id, $5 hash (uuid), $6 offset, $7 the
-- first offset of its segment.
WITH x AS (
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT u.partition_id, u.hash, u."offset", u.segment, $1::timestamptz
      FROM unnest($4::uuid[], $5::uuid[], $6::bigint[], $7::bigint[]) AS u (partition_id, hash, "offset", segment)
)
UPDATE queen.partition_ends e
   SET last_offset = n.last_offset
  FROM (SELECT u.partition_id, max(u.last_offset) AS last_offset
          FROM unnest($2::uuid[], $3::bigint[]) AS u (partition_id, last_offset)
         GROUP BY u.partition_id) n
 WHERE e.partition_id = n.partition_id

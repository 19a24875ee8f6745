-- Writes a bundle's or a transaction's level-0 sidecar rows: one
-- log_txn_hashes row per frame, stamped $1 (bundle_stamp), while the
-- partitions' row locks are held (bundle_bump took the last of them). Its
-- segments were written just before, by COPY in the same transaction
-- (persistence.bundleRows.copySegments: one WAL record per page of segment
-- rows, where one INSERT wrote one per row), with the same stamp.
-- Per frame (parallel arrays): $2 partition id, $3 hash (uuid), $4 offset,
-- $5 the first offset of its segment.
INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
SELECT u.partition_id, u.hash, u."offset", u.segment, $1::timestamptz
  FROM unnest($2::uuid[], $3::uuid[], $4::bigint[], $5::bigint[]) AS u (partition_id, hash, "offset", segment)

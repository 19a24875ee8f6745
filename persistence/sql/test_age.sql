-- Tests only (Store.AgePartitions): what the passing of $2 seconds looks
-- like to the window check and retention, which run on PostgreSQL's clock,
-- for the partitions $1 (uuid[]): their segments, log_txns and level-0
-- sidecar rows get created_at moved back by $2 (the segments to
-- segments_kept: no time range of segments_timed holds the past, migration
-- 0010; a level-0 row moves to the range or DEFAULT partition that covers
-- its new created_at). A compacted range (level 1) keeps its hashes under
-- its real time bounds, which no stored created_at leaves in production,
-- so the hashes of these partitions that are not at level 0 are written
-- there again under their log_txns row's new created_at, where the next
-- compaction finds them. One statement: every part reads the snapshot from
-- before the move.
WITH s AS (
    UPDATE queen.segments
       SET created_at = created_at - make_interval(secs => $2::float8), timed = false
     WHERE partition_id = ANY ($1::uuid[])
), t AS (
    UPDATE queen.log_txns
       SET created_at = created_at - make_interval(secs => $2::float8)
     WHERE partition_id = ANY ($1::uuid[])
    RETURNING partition_id, first_offset, created_at, hashes
), h AS (
    UPDATE queen.log_txn_hashes
       SET created_at = created_at - make_interval(secs => $2::float8)
     WHERE partition_id = ANY ($1::uuid[])
)
INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
SELECT t.partition_id, encode(substring(t.hashes FROM g.i * 16 + 1 FOR 16), 'hex')::uuid,
       t.first_offset + g.i, t.first_offset, t.created_at
  FROM t
 CROSS JOIN LATERAL generate_series(0, length(t.hashes) / 16 - 1) AS g (i)
 WHERE NOT EXISTS (SELECT 1 FROM queen.log_txn_hashes x
                    WHERE x.partition_id = t.partition_id AND x.segment = t.first_offset
                      AND x."offset" = t.first_offset + g.i)

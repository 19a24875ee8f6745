-- Writes a bundle: one segment and one log_txns row per partition, one
-- log_txn_hashes row per frame, and bumps each allocator, all stamped with one
-- clock_timestamp() while the row locks are held.
-- Per partition (parallel arrays): $1 id, $2 first offset, $3 last offset,
-- $4 message ids (16 bytes each), $5 packed frames, $6 packed hashes.
-- Per frame (parallel arrays): $7 partition id, $8 hash (uuid), $9 offset,
-- $10 the first offset of its segment.
--
-- A segment goes to segments_timed (dropped whole by time range) when its
-- queue has retentionSeconds now and a listed range holds now, else to
-- segments_kept (migration 0010).
WITH t AS (SELECT clock_timestamp() AS now),
seg AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bytea[], $6::bytea[])
        AS u (partition_id, first_offset, last_offset, message_ids, frames, hashes)
),
s AS (
    INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames, timed)
    SELECT seg.partition_id, seg.first_offset, seg.last_offset, t.now, seg.message_ids, seg.frames,
           COALESCE((SELECT (q.options ->> 'retentionSeconds')::float8 > 0
                       FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                      WHERE p.id = seg.partition_id), false)
           AND EXISTS (SELECT 1 FROM queen.segment_ranges r WHERE r.lo <= t.now AND r.hi > t.now)
      FROM seg, t
),
l AS (
    INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
    SELECT seg.partition_id, seg.first_offset, seg.last_offset, t.now, seg.hashes FROM seg, t
),
x AS (
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT u.partition_id, u.hash, u."offset", u.segment, t.now
      FROM unnest($7::uuid[], $8::uuid[], $9::bigint[], $10::bigint[]) AS u (partition_id, hash, "offset", segment), t
)
UPDATE queen.partitions p
   SET last_offset = seg.last_offset
  FROM seg
 WHERE p.id = seg.partition_id
RETURNING (SELECT now FROM t)

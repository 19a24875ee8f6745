-- Writes a bundle: its segments (their frames, message ids and
-- transaction-id hashes, migration 0017, and producer, migration 0018), one
-- level-0 log_txn_hashes row per frame, and bumps each allocator (its row of
-- queen.partition_ends, migration 0019) to its partition's last new offset,
-- all stamped with one clock_timestamp() while the row locks are held. A partition has one segment, or one per run of
-- items with the same producer (persistence.Store.assign): consecutive
-- offset ranges.
-- Per segment (parallel arrays): $1 partition id, $2 first offset, $3 last
-- offset, $4 message ids (16 bytes each), $5 packed frames, $6 packed
-- hashes, $11 whether its queue has retentionSeconds (read by bundle_probe
-- under the row locks), $12 its producer ('' = none). Per frame
-- (parallel arrays): $7 partition id, $8 hash (uuid), $9 offset, $10 the
-- first offset of its segment.
--
-- A segment goes to segments_timed (dropped whole by time range) when its
-- queue has retentionSeconds and a listed range holds now, else to
-- segments_kept (migration 0010). A configure that removes the retention
-- meanwhile leaves the segment timed, and its range is then kept: a range
-- is dropped only when every queue with rows in it still has a retention
-- they are past (segment_range_keepers).
WITH t AS MATERIALIZED (
    SELECT c.now, EXISTS (SELECT 1 FROM queen.segment_ranges r WHERE r.lo <= c.now AND r.hi > c.now) AS ranged
      FROM (SELECT clock_timestamp() AS now) c
),
seg AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bytea[], $6::bytea[], $11::boolean[], $12::text[])
        AS u (partition_id, first_offset, last_offset, message_ids, frames, hashes, retained, producer_sub)
),
s AS (
    INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames, hashes, timed, producer_sub)
    SELECT seg.partition_id, seg.first_offset, seg.last_offset, t.now, seg.message_ids, seg.frames, seg.hashes,
           seg.retained AND t.ranged, seg.producer_sub
      FROM seg, t
),
x AS (
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT u.partition_id, u.hash, u."offset", u.segment, t.now
      FROM unnest($7::uuid[], $8::uuid[], $9::bigint[], $10::bigint[]) AS u (partition_id, hash, "offset", segment), t
)
UPDATE queen.partition_ends e
   SET last_offset = n.last_offset
  FROM (SELECT partition_id, max(last_offset) AS last_offset FROM seg GROUP BY partition_id) n
 WHERE e.partition_id = n.partition_id
RETURNING (SELECT now FROM t)

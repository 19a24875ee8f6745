-- The dedupWindowSeconds = 0 path (SPEC.md §3): one UPDATE ... RETURNING
-- allocates n offsets (taking the row lock) and the same statement writes the
-- segment, its log_txns row and its hash index rows. It matches no row, and
-- writes nothing, when the window is not 0 any more. $1 partition id, $2 n,
-- $3 message ids, $4 frames, $5 packed hashes, $6 the same hashes as uuid[].
WITH a AS (
    UPDATE queen.partitions p
       SET last_offset = p.last_offset + $2
      FROM queen.queues q
     WHERE p.id = $1 AND q.id = p.queue_id AND q.dedup_window_seconds = 0
    RETURNING p.last_offset - $2 + 1 AS first_offset, p.last_offset, clock_timestamp() AS now
),
s AS (
    INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames)
    SELECT $1, a.first_offset, a.last_offset, a.now, $3, $4 FROM a
),
l AS (
    INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
    SELECT $1, a.first_offset, a.last_offset, a.now, $5 FROM a
),
x AS (
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT $1, u.h, a.first_offset + u.ord - 1, a.first_offset, a.now FROM a, unnest($6::uuid[]) WITH ORDINALITY AS u (h, ord)
)
SELECT first_offset, now FROM a

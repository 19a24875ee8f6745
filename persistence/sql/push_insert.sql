-- Writes one segment, its log_txns row and its per-hash index rows, and bumps
-- the allocator, all stamped with clock_timestamp() while the row lock is
-- held. $1 partition id, $2 first offset, $3 last offset, $4 message ids (16
-- bytes each), $5 packed frames, $6 packed hashes (16 bytes each, frame
-- order), $7 the same hashes as uuid[].
WITH t AS (SELECT clock_timestamp() AS now),
s AS (
    INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames)
    SELECT $1, $2, $3, t.now, $4, $5 FROM t
),
l AS (
    INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
    SELECT $1, $2, $3, t.now, $6 FROM t
),
x AS (
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", created_at)
    SELECT $1, u.h, $2 + u.ord - 1, t.now FROM t, unnest($7::uuid[]) WITH ORDINALITY AS u (h, ord)
)
UPDATE queen.partitions SET last_offset = $3 WHERE id = $1
RETURNING (SELECT now FROM t)

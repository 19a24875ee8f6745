-- The window probe (SPEC.md §3, §8). Run as its own statement after
-- push_lock, so its snapshot includes every commit made before we got the lock.
-- $1 partition id, $2 the distinct incoming hashes (bytea[]), $3 the watermark
-- offset (-1 = the whole window). Returns each hit's hash, offset and the
-- original's message id (NULL when its segment is gone).
SELECT u.h,
       l.first_offset + u.ord - 1 AS off,
       (SELECT substring(s.message_ids FROM ((l.first_offset + u.ord - 1 - s.first_offset) * 16 + 1)::int FOR 16)
          FROM queen.segments s
         WHERE s.partition_id = l.partition_id AND s.first_offset = l.first_offset) AS message_id
FROM queen.partitions p
JOIN queen.queues q ON q.id = p.queue_id
JOIN queen.log_txns l ON l.partition_id = p.id
CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS u (h, ord)
WHERE p.id = $1
  AND q.dedup_window_seconds > 0
  AND l.hashes && $2::bytea[]
  AND l.created_at > clock_timestamp() - make_interval(secs => q.dedup_window_seconds)
  AND l.last_offset > $3
  AND u.h = ANY ($2::bytea[])
  AND l.first_offset + u.ord - 1 > $3

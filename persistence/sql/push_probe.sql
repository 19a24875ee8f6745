-- The window probe (SPEC.md §3, §8). Run as its own statement after
-- push_lock, so its snapshot includes every commit made before we got the
-- lock. One hash-index lookup per incoming hash in log_txn_hashes.
-- $1 partition id, $2 the distinct incoming hashes (uuid[]), $3 the watermark
-- offset (-1 = the whole window). Returns each hit's hash, offset and the
-- original's message id sliced from its covering segment (NULL when that
-- segment is gone).
SELECT x.hash,
       x."offset",
       (SELECT substring(s.message_ids FROM ((x."offset" - s.first_offset) * 16 + 1)::int FOR 16)
          FROM queen.segments s
         WHERE s.partition_id = x.partition_id AND s.first_offset <= x."offset" AND s.last_offset >= x."offset"
         ORDER BY s.first_offset DESC
         LIMIT 1) AS message_id
FROM queen.partitions p
JOIN queen.queues q ON q.id = p.queue_id
JOIN queen.log_txn_hashes x ON x.partition_id = p.id
WHERE p.id = $1
  AND q.dedup_window_seconds > 0
  AND x.hash = ANY ($2::uuid[])
  AND x."offset" > $3
  AND x.created_at > clock_timestamp() - make_interval(secs => q.dedup_window_seconds)

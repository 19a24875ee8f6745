-- The window probe of a bundle (SPEC.md §3, §8), run as its own statement
-- after bundle_lock so its snapshot includes every commit made before the
-- locks were granted. One index lookup per incoming hash. $1, $2, $3
-- are parallel arrays: partition id, hash (uuid), the partition's watermark
-- offset (-1 = the whole window). Returns each hit's partition, hash, offset
-- and the original's message id sliced from its covering segment (NULL when
-- that segment is gone).
SELECT x.partition_id,
       x.hash,
       x."offset",
       (SELECT substring(s.message_ids FROM ((x."offset" - s.first_offset) * 16 + 1)::int FOR 16)
          FROM queen.segments s
         WHERE s.partition_id = x.partition_id AND s.first_offset <= x."offset" AND s.last_offset >= x."offset"
         ORDER BY s.first_offset DESC
         LIMIT 1) AS message_id
FROM unnest($1::uuid[], $2::uuid[], $3::bigint[]) AS i (partition_id, hash, watermark)
JOIN queen.partitions p ON p.id = i.partition_id
JOIN queen.queues q ON q.id = p.queue_id
JOIN queen.log_txn_hashes x ON x.hash = i.hash AND x.partition_id = i.partition_id
WHERE q.dedup_window_seconds > 0
  AND x."offset" > i.watermark
  AND x.created_at > clock_timestamp() - make_interval(secs => q.dedup_window_seconds)

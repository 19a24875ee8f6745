-- The window probe of a bundle (SPEC.md §3, §8), run as its own statement
-- after bundle_lock so its snapshot includes every commit made before the
-- locks were granted. Per partition (parallel arrays): $1 partition id, $3
-- its watermark offset (-1 = the whole window), $4..$5 the 1-based bounds of
-- its distinct incoming hashes in $2 (uuid[]). Returns each hit's partition,
-- hash, offset and the original's message id sliced from its covering
-- segment (NULL when that segment is gone).
--
-- Each partition is one scan of log_txn_hashes_lookup with its hashes as
-- array keys: one descent per hash, so the cost follows the number of
-- incoming hashes, not the window's size. The LATERAL ... OFFSET 0 keeps
-- that shape whatever the statistics said when the plan was cached: a plan
-- made while the table was empty must not scan a whole partition later.
SELECT x.partition_id,
       x.hash,
       x."offset",
       (SELECT substring(s.message_ids FROM ((x."offset" - s.first_offset) * 16 + 1)::int FOR 16)
          FROM queen.segments s
         WHERE s.partition_id = x.partition_id AND s.first_offset <= x."offset" AND s.last_offset >= x."offset"
         ORDER BY s.first_offset DESC
         LIMIT 1) AS message_id
FROM unnest($1::uuid[], $3::bigint[], $4::int[], $5::int[]) AS i (partition_id, watermark, lo, hi)
JOIN queen.partitions p ON p.id = i.partition_id
JOIN queen.queues q ON q.id = p.queue_id
CROSS JOIN LATERAL (
    SELECT x.partition_id, x.hash, x."offset"
      FROM queen.log_txn_hashes x
     WHERE x.partition_id = i.partition_id
       AND x.hash = ANY (($2::uuid[])[i.lo:i.hi])
       AND x."offset" > i.watermark
       AND x.created_at > clock_timestamp() - make_interval(secs => q.dedup_window_seconds)
    OFFSET 0
) x
WHERE q.dedup_window_seconds > 0

-- The window probe of a transaction's pushes (SPEC.md §3, §5), run after
-- bundle_lock in the same transaction, so its snapshot includes every commit
-- made before the locks were granted. A transaction does not pass through
-- the partition actors' hash caches, so there is no watermark: each incoming
-- hash is looked up in the whole window (one descent of
-- log_txn_hashes_lookup per hash, as in bundle_probe).
-- Per partition (parallel arrays): $1 partition id, $3..$4 the 1-based
-- bounds of its distinct incoming hashes in $2 (uuid[]).
--
-- Returns one row per partition with hash NULL, giving the window read from
-- its queue row (NULL when the partition is gone), then one row per hit:
-- partition, window, hash, offset and the original's message id sliced from
-- its covering segment (NULL when that segment is gone). A window of 0 looks
-- nothing up.
WITH w AS MATERIALIZED (
    SELECT i.partition_id, i.lo, i.hi,
           (SELECT q.dedup_window_seconds
              FROM queen.partitions p
              JOIN queen.queues q ON q.id = p.queue_id
             WHERE p.id = i.partition_id) AS seconds
      FROM unnest($1::uuid[], $3::int[], $4::int[]) AS i (partition_id, lo, hi)
)
SELECT w.partition_id, w.seconds, NULL::uuid AS hash, NULL::bigint AS "offset", NULL::bytea AS message_id
  FROM w
UNION ALL
SELECT x.partition_id,
       w.seconds,
       x.hash,
       x."offset",
       (SELECT substring(s.message_ids FROM ((x."offset" - s.first_offset) * 16 + 1)::int FOR 16)
          FROM queen.segments s
         WHERE s.partition_id = x.partition_id AND s.first_offset = x.segment)
  FROM w
 CROSS JOIN LATERAL unnest(($2::uuid[])[w.lo:w.hi]) AS h (hash)
 CROSS JOIN LATERAL (
    SELECT x.partition_id, x.hash, x."offset", x.segment
      FROM queen.log_txn_hashes x
     WHERE x.partition_id = w.partition_id
       AND x.hash = h.hash
       AND x.created_at > clock_timestamp() - make_interval(secs => w.seconds)
    OFFSET 0
 ) x
 WHERE w.seconds > 0

-- The window probe of a bundle (SPEC.md §3, §8), run as its own statement
-- after bundle_lock, so its snapshot includes every commit made before the
-- locks were granted: the pushes of other brokers and the latest configure.
-- Per partition (parallel arrays): $1 partition id, $3 its watermark offset
-- (-1 = the whole window), $4..$5 the 1-based bounds of its distinct
-- incoming hashes in $2 (uuid[]).
--
-- Returns one row per partition with hash NULL, giving the window read from
-- its queue row, then one row per hit: partition, window, hash, offset and
-- the original's message id sliced from its covering segment (NULL when that
-- segment is gone). A window of 0 looks nothing up.
--
-- Every lookup is an equality on a primary key or on both columns of
-- log_txn_hashes_lookup, and the LATERAL ... OFFSET 0 subqueries keep them
-- per-row lookups, so each incoming hash is one index descent whatever the
-- statistics said when the plan was cached: a generic plan made while the
-- tables were small must not scan a partition later (an `= ANY(array
-- slice)` probe and a `first_offset <= x ORDER BY ... LIMIT 1` segment lookup
-- both did, and pushes slowed down as the window filled).
WITH w AS MATERIALIZED (
    SELECT i.partition_id, i.watermark, i.lo, i.hi,
           (SELECT q.dedup_window_seconds
              FROM queen.partitions p
              JOIN queen.queues q ON q.id = p.queue_id
             WHERE p.id = i.partition_id) AS seconds
      FROM unnest($1::uuid[], $3::bigint[], $4::int[], $5::int[]) AS i (partition_id, watermark, lo, hi)
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
       AND x."offset" > w.watermark
       AND x.created_at > clock_timestamp() - make_interval(secs => w.seconds)
    OFFSET 0
 ) x
 WHERE w.seconds > 0

-- A hash cache's fingerprints of partition $1 for the last $2 seconds
-- (SPEC.md §8, migration 0021), read when a hydration met segments that
-- retention removed inside the window: one row per sidecar range ending
-- inside the window, in time order, giving its bounds, whether its
-- fingerprints are complete (compacted by a release that writes them, and
-- not emptied by a crash since: listed in hash_prints_alive) and, when they
-- are, the partition's (NULL: it stored nothing in the range). Then, when
-- the DEFAULT partition of log_txn_hashes holds hashes of the partition in
-- the window (pushes stamped in a range already compacted), one more row
-- with complete true, their fingerprints and the span of their created_at.
-- No lock; one primary-key descent per range.
SELECT r.lo, r.hi, (a.lo IS NOT NULL) AS complete, p.prints
  FROM queen.sidecar_ranges r
  LEFT JOIN queen.hash_prints_alive a ON a.lo = r.lo
  LEFT JOIN LATERAL (
    SELECT p.prints FROM queen.hash_prints p
     WHERE p.lo = r.lo AND p.partition_id = $1 AND a.lo IS NOT NULL
    OFFSET 0
  ) p ON true
 WHERE r.hi > clock_timestamp() - make_interval(secs => $2::bigint)
UNION ALL
SELECT min(d.created_at), max(d.created_at), true,
       string_agg(substring(uuid_send(d.hash) FROM 1 FOR 4), ''::bytea)
  FROM queen.log_txn_hashes_default d
 WHERE d.partition_id = $1
   AND d.created_at > clock_timestamp() - make_interval(secs => $2::bigint)
HAVING count(*) > 0
ORDER BY 1

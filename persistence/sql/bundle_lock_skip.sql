-- A bundle's second attempt after its first was cancelled by lock_timeout
-- (SQLSTATE 55P03; Store.CommitBundle): takes the write locks of the
-- bundle's partitions that are free now, in ascending id order, and skips
-- those another session holds, so a stuck partition never fails its
-- neighbours. $1 partition ids. One row per partition with a row in
-- queen.partition_ends: id, allocator (NULL when skipped), the lock wait in
-- seconds (as bundle_lock), and whether this transaction holds the lock. A
-- partition with no row was deleted or lost its row to a crash (as
-- bundle_lock). The lock is bundle_lock's.
WITH l AS (
    SELECT e.partition_id AS id, e.last_offset
      FROM queen.partition_ends e
     WHERE e.partition_id = ANY ($1::uuid[])
     ORDER BY e.partition_id
       FOR NO KEY UPDATE SKIP LOCKED
)
SELECT e.partition_id, l.last_offset,
       EXTRACT(epoch FROM clock_timestamp() - statement_timestamp())::float8,
       l.id IS NOT NULL
FROM queen.partition_ends e
LEFT JOIN l ON l.id = e.partition_id
WHERE e.partition_id = ANY ($1::uuid[])

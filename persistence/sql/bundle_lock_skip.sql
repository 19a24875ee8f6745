-- A bundle's second attempt after its first was cancelled by lock_timeout
-- (SQLSTATE 55P03; Store.CommitBundle): takes the row locks of the bundle's
-- partitions that are free now, in ascending id order, and skips those
-- another session holds, so a stuck partition never fails its neighbours.
-- $1 partition ids. One row per existing partition: id, allocator (NULL
-- when skipped), the lock wait in seconds (as bundle_lock), and whether
-- this transaction holds the lock. A partition with no row was deleted.
-- The lock is bundle_lock's (FOR NO KEY UPDATE).
WITH l AS (
    SELECT p.id, p.last_offset
    FROM queen.partitions p
    WHERE p.id = ANY ($1::uuid[])
    ORDER BY p.id
    FOR NO KEY UPDATE OF p SKIP LOCKED
)
SELECT p.id, l.last_offset,
       EXTRACT(epoch FROM clock_timestamp() - statement_timestamp())::float8,
       l.id IS NOT NULL
FROM queen.partitions p
LEFT JOIN l ON l.id = p.id
WHERE p.id = ANY ($1::uuid[])

-- Takes the write locks of the partitions of a bundle its actors do not
-- know (all of them for a transaction, or for a bundle run again:
-- persistence.lockBundle) in ascending id order (the global lock order) and
-- reads each allocator and the partition's number, which its segments
-- carry (migration 0025) (SPEC.md §2, §3, DESIGN.md): the rows of
-- queen.partition_ends (migration 0019, UNLOGGED: the lock and the update
-- write no WAL). $1 partition ids. A partition with no row here is either
-- deleted or has lost its row to a crash (partition_ends_ensure rebuilds
-- it; Store.lockBundle then locks again). No row outlives its partition
-- (admin_delete_queue_lock, partition_ends_ensure), so the lock reads
-- nothing else.
-- The window is read by bundle_probe, whose snapshot is taken after the
-- locks are granted: a row read here through a join could predate a
-- configure that committed while this statement waited for a lock.
-- The third column is the seconds from the statement's start to the row's
-- lock being granted (the outer projection runs above the CTE's LockRows):
-- the lock wait of /metrics. The session's lock_timeout bounds each wait.
-- A bundle's second attempt after a lock timeout runs this same statement
-- with SKIP LOCKED (persistence.skipLocked, which edits the lock clause
-- below: it must occur once in this file, comments included).
WITH l AS (
    SELECT e.partition_id AS id, e.last_offset, e.num
      FROM queen.partition_ends e
     WHERE e.partition_id = ANY ($1::uuid[])
     ORDER BY e.partition_id
       FOR NO KEY UPDATE
)
SELECT l.id, l.last_offset, l.num,
       EXTRACT(epoch FROM clock_timestamp() - statement_timestamp())::float8
FROM l

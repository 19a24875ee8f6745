-- Takes the row locks of every partition of a bundle in ascending id order
-- (the global lock order, so concurrent bundles cannot deadlock) and reads
-- each allocator (SPEC.md §3, DESIGN.md). $1 partition ids. The window is
-- read by bundle_probe, whose snapshot is taken after the locks are granted:
-- a row read here through a join could predate a configure that committed
-- while this statement waited for a lock.
-- The third column is the seconds from the statement's start to the row's
-- lock being granted (the outer projection runs above the CTE's LockRows):
-- the lock wait of /metrics. The session's lock_timeout bounds each wait.
-- FOR NO KEY UPDATE (what the allocator's UPDATE takes anyway) serialises
-- pushes to a partition without blocking the key-share lock a consumer
-- row's creation (its foreign key) takes on the partition row: a group's
-- first pop of a partition does not wait for a push to it to commit.
WITH l AS (
    SELECT p.id, p.last_offset
    FROM queen.partitions p
    WHERE p.id = ANY ($1::uuid[])
    ORDER BY p.id
    FOR NO KEY UPDATE OF p
)
SELECT l.id, l.last_offset,
       EXTRACT(epoch FROM clock_timestamp() - statement_timestamp())::float8
FROM l

-- The first statement of a queue's deletion (Store.DeleteQueue), in its
-- transaction: locks queue $1's row, its partitions' rows (FOR UPDATE, in
-- ascending id: the global order) and their allocator rows in
-- queen.partition_ends (migration 0019), so the pushes in flight finish
-- first and new ones wait. A rebuild of an allocator row
-- (partition_ends_ensure) holds its partition's row FOR KEY SHARE: it
-- finishes first, or finds the partition gone. admin_delete_queue then
-- runs as a statement of its own, whose snapshot sees every row those
-- sessions committed. Returns the queue id (NULL when there is none).
WITH q AS (
    SELECT id FROM queen.queues WHERE name = $1 FOR UPDATE
), p AS (
    SELECT id FROM queen.partitions WHERE queue_id IN (SELECT id FROM q) ORDER BY id FOR UPDATE
), e AS (
    SELECT e.partition_id FROM queen.partition_ends e
     WHERE e.partition_id IN (SELECT id FROM p)
     ORDER BY e.partition_id
       FOR UPDATE
)
SELECT (SELECT id FROM q), (SELECT count(*) FROM p), (SELECT count(*) FROM e)

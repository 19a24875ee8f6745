-- $1 queue name, $2 partition name, $3 a fresh partition id.
-- Each new partition gets its allocator row in queen.partition_ends
-- (migration 0019), in the same statement.
WITH p AS (
    INSERT INTO queen.partitions (id, queue_id, name)
    SELECT $3, q.id, $2 FROM queen.queues q WHERE q.name = $1
    ON CONFLICT (queue_id, name) DO NOTHING
    RETURNING id, num
)
INSERT INTO queen.partition_ends (partition_id, last_offset, num)
SELECT id, -1, num FROM p
ON CONFLICT (partition_id) DO NOTHING

-- Creates the partitions of several (queue, partition) pairs that do not
-- exist yet, in one statement (SPEC.md §1: a partition exists from its first
-- push). The queues must exist (ensure_queue). Rows are inserted in the
-- order given, which the caller sorts, so two brokers creating overlapping
-- sets wait on each other in one order and cannot deadlock.
-- $1 queue names (text[]), $2 partition names (text[]), $3 fresh ids (uuid[]).
-- Each new partition gets its allocator row in queen.partition_ends
-- (migration 0019), in the same statement.
WITH p AS (
    INSERT INTO queen.partitions (id, queue_id, name)
    SELECT u.id, q.id, u.name
      FROM unnest($1::text[], $2::text[], $3::uuid[]) WITH ORDINALITY AS u (queue, name, id, ord)
      JOIN queen.queues q ON q.name = u.queue
     ORDER BY u.ord
    ON CONFLICT (queue_id, name) DO NOTHING
    RETURNING id, num
)
INSERT INTO queen.partition_ends (partition_id, last_offset, num)
SELECT id, -1, num FROM p
ON CONFLICT (partition_id) DO NOTHING

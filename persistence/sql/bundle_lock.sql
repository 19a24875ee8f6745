-- Takes the row locks of every partition of a bundle in ascending id order
-- (the global lock order, so concurrent bundles cannot deadlock) and reads
-- each allocator and window (SPEC.md §3, DESIGN.md). $1 partition ids.
SELECT p.id, p.last_offset, q.dedup_window_seconds
FROM queen.partitions p
JOIN queen.queues q ON q.id = p.queue_id
WHERE p.id = ANY ($1::uuid[])
ORDER BY p.id
FOR UPDATE OF p

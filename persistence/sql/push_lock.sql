-- Takes the partition row lock (the per-partition write serializer) and reads
-- the allocator and the window from the queue row (SPEC.md §3). $1 partition id.
SELECT p.last_offset, q.dedup_window_seconds
FROM queen.partitions p
JOIN queen.queues q ON q.id = p.queue_id
WHERE p.id = $1
FOR UPDATE OF p

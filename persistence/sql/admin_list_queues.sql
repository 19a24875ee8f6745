-- Every queue with its partition count, stored message count, depth (the
-- messages above the queue-mode group's cursors) and options.
SELECT q.name, q.namespace, q.task, q.created_at,
       count(p.id),
       COALESCE(sum(COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) + 1), 0)::bigint,
       COALESCE(sum(COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) - COALESCE(c."cursor", -1)), 0)::bigint,
       q.options
FROM queen.queues q
LEFT JOIN queen.partitions p ON p.queue_id = q.id
LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = '__QUEUE_MODE__'
GROUP BY q.id
ORDER BY q.name

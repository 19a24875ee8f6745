-- $1 queue name.
SELECT q.name, q.namespace, q.task, q.options, q.created_at,
       (SELECT count(*) FROM queen.partitions p WHERE p.queue_id = q.id) AS partitions,
       (SELECT coalesce(sum(COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) + 1), 0) FROM queen.partitions p LEFT JOIN queen.partition_ends e ON e.partition_id = p.id WHERE p.queue_id = q.id) AS messages
FROM queen.queues q
WHERE q.name = $1

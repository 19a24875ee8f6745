SELECT p.id
FROM queen.partitions p
JOIN queen.queues q ON q.id = p.queue_id
WHERE q.name = $1 AND p.name = $2

-- Every dead letter of the named queues, oldest first.
SELECT q.name, p.name, d.partition_id, d.consumer_group, d."offset", d.message_id, d.frame, d.error, d.attempts
FROM queen.dead_letters d
JOIN queen.queues q ON q.id = d.queue_id
LEFT JOIN queen.partitions p ON p.id = d.partition_id
WHERE q.name = ANY ($1::text[])
ORDER BY d.id;

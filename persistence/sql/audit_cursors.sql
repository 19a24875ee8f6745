-- Every consumer row of the named queues: queue, partition, group, cursor,
-- and the partition's last allocated offset.
SELECT q.name, p.name, p.id, c.consumer_group, c."cursor", COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset))
FROM queen.consumers c
JOIN queen.partitions p ON p.id = c.partition_id
LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
JOIN queen.queues q ON q.id = p.queue_id
WHERE q.name = ANY ($1::text[])
ORDER BY q.name, p.name, c.consumer_group;

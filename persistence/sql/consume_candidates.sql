-- Partitions of queue $1 that may hold messages group $2 can take now: the
-- allocator is above the group's cursor and no live lease holds them. A hint
-- for wildcard pops, which re-check each under its consumer row lock. At
-- most $3.
SELECT p.id
FROM queen.partitions p
LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
JOIN queen.queues q ON q.id = p.queue_id
LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = $2
WHERE q.name = $1
  AND COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) > COALESCE(c."cursor", -1)
  AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= clock_timestamp())
LIMIT $3

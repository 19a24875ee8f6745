-- A queue's partitions for its detail (GET /api/v1/queues/{queue}): $1
-- queue name, $2 most partitions listed. By name (byte order); the last
-- column counts every partition of the queue. No row for a queue without
-- partitions, or that does not exist (the caller tells them apart).
SELECT p.name, p.id, COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)), p.created_at, count(*) OVER ()
  FROM queen.queues q
  JOIN queen.partitions p ON p.queue_id = q.id
  LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
 WHERE q.name = $1
 ORDER BY p.name COLLATE "C"
 LIMIT $2

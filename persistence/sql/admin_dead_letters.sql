-- Dead letters, oldest first, filtered by queue $1, group $2 and partition
-- name $5 ('' = any) and dead-lettered within [$6, $7] (NULL = open), $3
-- rows from row $4, with the total count of the filter.
SELECT d.id, q.name, COALESCE(p.name, ''), d.partition_id, d.consumer_group, d."offset", d.message_id,
       d.frame, d.created_at, d.error, d.attempts, d.dead_at, count(*) OVER ()
FROM queen.dead_letters d
JOIN queen.queues q ON q.id = d.queue_id
LEFT JOIN queen.partitions p ON p.id = d.partition_id
WHERE ($1 = '' OR q.name = $1) AND ($2 = '' OR d.consumer_group = $2)
  AND ($5 = '' OR p.name = $5)
  AND ($6::timestamptz IS NULL OR d.dead_at >= $6) AND ($7::timestamptz IS NULL OR d.dead_at <= $7)
ORDER BY d.id
LIMIT $3 OFFSET $4

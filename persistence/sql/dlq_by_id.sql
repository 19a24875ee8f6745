-- Dead letters by id for DLQ replay (SPEC.md §13), oldest first: ids $3
-- (bigint[]) that belong to queue $1 and, unless $2 is '', to consumer group
-- $2. Same columns as admin_dead_letters (the last one, the count, over the
-- rows returned). One primary-key lookup per id.
SELECT d.id, q.name, COALESCE(p.name, ''), d.partition_id, d.consumer_group, d."offset", d.message_id,
       d.frame, d.created_at, d.error, d.attempts, d.dead_at, d.producer_sub, count(*) OVER ()
FROM queen.dead_letters d
JOIN queen.queues q ON q.id = d.queue_id
LEFT JOIN queen.partitions p ON p.id = d.partition_id
WHERE d.id = ANY ($3::bigint[])
  AND q.name = $1 AND ($2 = '' OR d.consumer_group = $2)
ORDER BY d.id

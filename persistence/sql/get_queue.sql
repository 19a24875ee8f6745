-- $1 queue name.
SELECT q.name, q.namespace, q.task, q.options, q.created_at,
       (SELECT count(*) FROM queen.partitions p WHERE p.queue_id = q.id) AS partitions,
       (SELECT coalesce(sum(p.last_offset + 1), 0) FROM queen.partitions p WHERE p.queue_id = q.id) AS messages
FROM queen.queues q
WHERE q.name = $1

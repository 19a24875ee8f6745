-- $1 queue name, $2 partition name, $3 a fresh partition id.
INSERT INTO queen.partitions (id, queue_id, name)
SELECT $3, q.id, $2 FROM queen.queues q WHERE q.name = $1
ON CONFLICT (queue_id, name) DO NOTHING

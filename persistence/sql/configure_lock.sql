-- $1 queue name. Locks the queue row for a configure call.
SELECT options, namespace, task FROM queen.queues WHERE name = $1 FOR UPDATE

-- The queues consumer group $1 has cursors or a subscription in.
SELECT q.name FROM queen.queues q
WHERE EXISTS (SELECT 1 FROM queen.consumers c WHERE c.queue_id = q.id AND c.consumer_group = $1)
   OR EXISTS (SELECT 1 FROM queen.subscriptions s WHERE s.queue_id = q.id AND s.consumer_group = $1)
ORDER BY q.name

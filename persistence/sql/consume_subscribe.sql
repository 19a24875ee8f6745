-- Records consumer group $2's subscription of queue $1 at its first pop,
-- before any partition exists: from $3, or from now when $4
-- (subscriptionMode new), or from the oldest message (both NULL/false).
-- A no-op when the group is subscribed already; no row when the queue does
-- not exist.
INSERT INTO queen.subscriptions (queue_id, consumer_group, from_ts)
SELECT q.id, $2, CASE WHEN $4::boolean THEN clock_timestamp() ELSE $3::timestamptz END
FROM queen.queues q
WHERE q.name = $1
ON CONFLICT DO NOTHING
RETURNING 1

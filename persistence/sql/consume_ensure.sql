-- Creates the consumer row of (partition $1, group $2) on first use, with its
-- cursor at the group's subscription point in that partition (SPEC.md §4):
-- -1 (from the oldest message) without one, else just below the first
-- segment stored at or after the subscription's from_ts. When $5 is true
-- (a pop) the group's subscription of the queue is recorded first if it has
-- none: from $3, or from now when $4 (subscriptionMode new). An ack ($5
-- false) never subscribes. A no-op when the consumer row exists.
WITH part AS (
    SELECT p.id, p.num, p.queue_id FROM queen.partitions p WHERE p.id = $1
), sub AS (
    INSERT INTO queen.subscriptions (queue_id, consumer_group, from_ts)
    SELECT part.queue_id, $2, CASE WHEN $4::boolean THEN clock_timestamp() ELSE $3::timestamptz END
    FROM part
    WHERE $5::boolean
      AND NOT EXISTS (SELECT 1 FROM queen.consumers c WHERE c.partition_id = $1 AND c.consumer_group = $2)
    ON CONFLICT DO NOTHING
    RETURNING from_ts
), eff AS (
    SELECT from_ts FROM sub
    UNION ALL
    SELECT s.from_ts FROM queen.subscriptions s, part WHERE s.queue_id = part.queue_id AND s.consumer_group = $2
    LIMIT 1
)
INSERT INTO queen.consumers (partition_id, consumer_group, queue_id, "cursor")
SELECT part.id, $2, part.queue_id,
       CASE WHEN (SELECT from_ts FROM eff) IS NULL THEN -1
            ELSE COALESCE((SELECT s.last_offset FROM queen.segments s
                           WHERE s.partition_num = part.num AND s.created_at < (SELECT from_ts FROM eff)
                           ORDER BY s.first_offset DESC LIMIT 1), -1)
       END
FROM part
WHERE NOT EXISTS (SELECT 1 FROM queen.consumers c WHERE c.partition_id = $1 AND c.consumer_group = $2)
ON CONFLICT DO NOTHING

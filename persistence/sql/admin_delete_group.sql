-- Drops consumer group $1: its cursors, leases and subscriptions (dead
-- letters stay). Returns how many consumer rows were removed. The consumer
-- rows are found queue by queue through consumers_queue (queue_id,
-- consumer_group); every consumer row's queue exists (a queue's delete
-- cascades to its partitions and their consumer rows). The group's rows of
-- queen.consumer_leases are left to the retention pass (they match no
-- consumer row any more, so an extend of such a lease is lease_invalid).
WITH s AS (
    DELETE FROM queen.subscriptions WHERE consumer_group = $1
), d AS (
    DELETE FROM queen.consumers c
     USING queen.queues q
     WHERE c.queue_id = q.id AND c.consumer_group = $1
    RETURNING 1
)
SELECT count(*) FROM d

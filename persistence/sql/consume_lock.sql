-- Locks the consumer row of (partition $1, group $2) and reads its state
-- with the partition's allocator, names and queue options, and the
-- database's clock. consume_lock_skip is the same lock for a pop that skips
-- a row another request is popping or acking instead of waiting for it;
-- ack_lock reads the same columns, and consume_lock_many(_skip) and
-- ack_lock_many the same for many rows in one statement. Keep them in step.
SELECT c."cursor",
       c.lease_id,
       COALESCE(c.lease_expires_at > clock_timestamp(), false),
       c.lease_to,
       c.fail_counts,
       COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)),
       p.name,
       q.name,
       COALESCE((q.options ->> 'leaseTime')::bigint, 300),
       COALESCE((q.options ->> 'retryLimit')::bigint, 3),
       COALESCE((q.options ->> 'delayedProcessing')::bigint, 0),
       COALESCE((q.options ->> 'windowBuffer')::bigint, 0),
       clock_timestamp(),
       c.bisect
FROM queen.consumers c
JOIN queen.partitions p ON p.id = c.partition_id
LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
JOIN queen.queues q ON q.id = p.queue_id
WHERE c.partition_id = $1 AND c.consumer_group = $2
FOR UPDATE OF c

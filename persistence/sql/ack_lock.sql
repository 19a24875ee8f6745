-- consume_lock for an ack (SPEC.md §4): locks the consumer row of
-- (partition $1, group $2) and reads the same columns, plus the seconds from
-- the statement's start to the lock being granted (the outer projection runs
-- above the CTE's LockRows): the ack lock wait of /metrics. The session's
-- lock_timeout bounds the wait. Keep the CTE's columns as consume_lock's.
WITH l ("cursor", lease_id, live, lease_to, fail_counts, last_offset, partition_name,
       queue_name, lease_time, retry_limit, delayed, window_buffer, now, bisect) AS (
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
)
SELECT l.*, EXTRACT(epoch FROM clock_timestamp() - statement_timestamp())::float8
FROM l

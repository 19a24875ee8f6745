-- The segments holding the next messages of partition $1 for group $2 above
-- its cursor (read from the consumer row, which this transaction has just
-- locked), in offset order: only when no live lease holds the row, only
-- messages stored at least delayedProcessing seconds ago, and only once the
-- partition's newest segment is windowBuffer seconds old (SPEC.md §6). At
-- most as many segments as needed to fill a batch of $3 messages: each
-- segment holds at least one message above the cursor, so at most $3 are
-- read, and the running count stops earlier when segments hold many.
-- consume_segments_many is the same for many partitions in one statement
-- (a multi-partition pop); keep the two in step.
WITH c AS (
    SELECT c."cursor",
           clock_timestamp() - make_interval(secs => COALESCE((q.options ->> 'delayedProcessing')::bigint, 0)) AS visible,
           COALESCE((q.options ->> 'windowBuffer')::bigint, 0) AS buffer
      FROM queen.consumers c
      JOIN queen.partitions p ON p.id = c.partition_id
      LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE c.partition_id = $1 AND c.consumer_group = $2
       AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= clock_timestamp())
       AND COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) > c."cursor"
), ok AS (
    SELECT c.* FROM c
     WHERE c.buffer = 0
        OR (SELECT s.created_at FROM queen.segments s WHERE s.partition_id = $1 ORDER BY s.first_offset DESC LIMIT 1)
           <= clock_timestamp() - make_interval(secs => c.buffer)
)
SELECT first_offset, last_offset, created_at, message_ids, frames, producer_sub
FROM (
    SELECT s.*, sum(s.last_offset - GREATEST(s.first_offset, ok."cursor" + 1) + 1) OVER (ORDER BY s.first_offset) AS acc,
           s.last_offset - GREATEST(s.first_offset, ok."cursor" + 1) + 1 AS n
    FROM ok
    CROSS JOIN LATERAL (
        SELECT first_offset, last_offset, created_at, message_ids, frames, producer_sub
        FROM queen.segments
        WHERE partition_id = $1 AND last_offset > ok."cursor" AND created_at <= ok.visible
          -- An index bound: the segment holding the cursor's next offset
          -- starts at or after this (last_offset alone is a filter, and
          -- the scan read every consumed segment still stored first).
          AND first_offset >= COALESCE((SELECT s.first_offset FROM queen.segments s
                                         WHERE s.partition_id = $1 AND s.first_offset <= ok."cursor" + 1
                                         ORDER BY s.first_offset DESC LIMIT 1), -1)
        ORDER BY first_offset
        LIMIT $3
    ) s
) x
WHERE acc - n < $3
ORDER BY first_offset

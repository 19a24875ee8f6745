-- Moves group $2's cursors in every partition of queue $1: to the
-- beginning (-1) when $4, to the end ($3 NULL), or to just below the first
-- segment stored at or after $3 (the end when there is none). Leases, retry counts and bisections are cleared. Returns the
-- partitions moved.
INSERT INTO queen.consumers AS c (partition_id, consumer_group, queue_id, "cursor")
SELECT p.id, $2, p.queue_id,
       CASE WHEN $4::boolean THEN -1
            WHEN $3::timestamptz IS NULL THEN COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset))
            ELSE COALESCE((SELECT s.first_offset - 1 FROM queen.segments s
                           WHERE s.partition_num = p.num AND s.created_at >= $3::timestamptz
                           ORDER BY s.first_offset LIMIT 1), COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)))
       END
FROM queen.partitions p
LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
JOIN queen.queues q ON q.id = p.queue_id
WHERE q.name = $1
ON CONFLICT (partition_id, consumer_group) DO UPDATE
SET "cursor" = EXCLUDED."cursor", cursor_at = NULL, cursor_at_of = NULL, lease_id = NULL, lease_expires_at = NULL, lease_to = NULL,
    fail_counts = '{}', bisect = NULL, updated_at = clock_timestamp()
RETURNING c.partition_id

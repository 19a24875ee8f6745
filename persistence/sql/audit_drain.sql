-- The load test's drain check (read-only): over the partitions of queue $1
-- named in $3 that hold a message (last_offset >= 0) and the consumer
-- groups $2, how many (group, partition) pairs are not consumed to the end
-- (no consumer row, or a cursor short of the last offset), one such pair,
-- and the sum over the pairs' consumer rows of cursor + 1, which grows as
-- long as anything is consumed. One aggregate instead of every consumer
-- row (audit_cursors), so polling it stays cheap at thousands of
-- partitions.
WITH p AS (
    SELECT p.id, p.name, COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) AS last_offset
    FROM queen.partitions p
    LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
    JOIN queen.queues q ON q.id = p.queue_id
    -- A join, not p.name = ANY ($3): ANY compares each row with every
    -- name (10,000 partitions: 10^8 comparisons).
    JOIN unnest($3::text[]) AS n (name) ON n.name = p.name
    WHERE q.name = $1
), pairs AS (
    SELECT g.name AS grp, p.name AS part, p.last_offset, c."cursor"
    FROM p
    CROSS JOIN unnest($2::text[]) AS g (name)
    LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = g.name
), behind AS (
    SELECT * FROM pairs WHERE last_offset >= 0 AND ("cursor" IS NULL OR "cursor" <> last_offset)
)
SELECT (SELECT count(*) FROM behind),
       (SELECT COALESCE(sum("cursor" + 1), 0) FROM pairs)::bigint,
       b.grp, b.part, b."cursor", b.last_offset
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT * FROM behind LIMIT 1) AS b ON true

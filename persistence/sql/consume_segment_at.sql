-- The segment of partition $1 holding offset $2: the last one starting at
-- or below it, when it reaches it (one backward index descent per time
-- range; a two-sided filter read every segment below the offset).
SELECT first_offset, created_at, legacy_ids, frames, producer_sub
FROM (
    SELECT first_offset, last_offset, created_at, legacy_ids, frames, producer_sub
    FROM queen.segments
    WHERE partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = $1) AND first_offset <= $2
    ORDER BY first_offset DESC
    LIMIT 1
) s
WHERE s.last_offset >= $2

-- The segments holding partition $1's next messages above cursor $2, in
-- offset order, stored at or before $4 (delayedProcessing), only as many as
-- needed to fill a batch of $3 messages (each segment holds at least one
-- message above the cursor, so at most $3 are read; the running count stops
-- earlier when segments hold many).
SELECT first_offset, last_offset, created_at, message_ids, frames
FROM (
    SELECT s.*, sum(s.last_offset - GREATEST(s.first_offset, $2 + 1) + 1) OVER (ORDER BY s.first_offset) AS acc
    FROM (
        SELECT first_offset, last_offset, created_at, message_ids, frames
        FROM queen.segments
        WHERE partition_id = $1 AND last_offset > $2 AND created_at <= $4
        ORDER BY first_offset
        LIMIT $3
    ) s
) x
WHERE acc - (last_offset - GREATEST(first_offset, $2 + 1) + 1) < $3
ORDER BY first_offset

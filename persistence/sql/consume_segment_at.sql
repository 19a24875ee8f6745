-- The segment of partition $1 holding offset $2.
SELECT first_offset, created_at, message_ids, frames
FROM queen.segments
WHERE partition_id = $1 AND first_offset <= $2 AND last_offset >= $2

-- The segment of partition $1 holding the lowest stored offset above $2 (a
-- cursor): where an expired lease's first unacked message lives (SPEC.md
-- §4). No row when nothing above the cursor is stored (retention took it).
SELECT first_offset, created_at, message_ids, frames
FROM queen.segments
WHERE partition_id = $1 AND last_offset > $2
ORDER BY first_offset
LIMIT 1

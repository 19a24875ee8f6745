-- The segment of partition $1 holding the lowest stored offset above $2 (a
-- cursor): where an expired lease's first unacked message lives (SPEC.md
-- §4). No row when nothing above the cursor is stored (retention took it).
SELECT first_offset, created_at, legacy_ids, frames, producer_sub
FROM queen.segments
WHERE partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = $1) AND last_offset > $2
  -- An index bound (see consume_segments_many).
  AND first_offset >= COALESCE((SELECT s.first_offset FROM queen.segments s
                                 WHERE s.partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = $1)
                                   AND s.first_offset <= $2 + 1
                                 ORDER BY s.first_offset DESC LIMIT 1), -1)
ORDER BY first_offset
LIMIT 1
